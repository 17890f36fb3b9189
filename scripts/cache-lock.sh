# Sourced by scripts/cached-venv.sh and scripts/setup.sh: the lock of the shared set-up cache.
# Everything that builds or replaces something in $CACHE (the dependency venvs, the class-data-sharing
# archives) does so between cache_lock and cache_unlock, so two set-ups at once (two CI runs, a user
# and CI) never build into the same place or delete each other's work. Readers take no lock: what is
# built appears in its final place by one rename (venv-<key>.building-<pid> -> venv-<key>, a file
# ...jsa.building-<pid> -> ...jsa), so a finished item is complete and an unfinished one is only a
# temporary. After taking the lock, the caller re-checks whether the item is still missing (the set-up
# it waited for may have built it).
#   $CACHE                        the cache folder (set by the caller)
#   SOLARIS_SETUP_LOCKED_HOOK     for the tests only: a command run right after the lock is taken
# flock(1) (util-linux) locks an open file; the kernel releases it when its holder dies, even killed.

CACHE_LOCK_FILE="$CACHE/.setup.lock"

cache_lock() {
  command -v flock >/dev/null || { echo "[setup] error: flock (util-linux) is needed" >&2; return 1; }
  mkdir -p "$CACHE"
  exec 9>>"$CACHE_LOCK_FILE"
  if ! flock -n 9; then
    echo "[setup] waiting for another set-up holding $CACHE_LOCK_FILE"
    flock 9
  fi
  if [ -n "${SOLARIS_SETUP_LOCKED_HOOK:-}" ]; then "$SOLARIS_SETUP_LOCKED_HOOK"; fi
  # Whoever builds holds this lock, so a temporary left now is a killed build's: remove it.
  local stale
  for stale in "$CACHE"/venv-*.building-* "$CACHE"/spark-classes-*.jsa.building-*; do
    [ -e "$stale" ] || continue
    echo "[setup] removing $stale (left by an interrupted set-up)"
    rm -rf "$stale"
  done
}

cache_unlock() {
  exec 9>&-
}
