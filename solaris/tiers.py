"""Serving tiers: the codes the resolver returns with every value and the VM reads as an input.

Kept in one module of the frame (no imports) so the resolver, the models and the evaluation agree
on the codes without the model layer importing the serving layer. The resolver tries the tiers in
``SERVING_ORDER``, best expected quality first; ``TIER_NONE`` means nothing servable (zero vector).
"""

TIER_NONE = 0
TIER_PAIR = 1  # the FM's own pair embedding, speculated and scored ahead of time
TIER_USER = 2  # the user's mean pair embedding over the last window
TIER_IMPUTED = 3  # imputed from the user's KNN neighbours' aggregates
TIER_ITEM = 4  # the item's mean pair embedding over the last window: the only tier for a brand-new user

SERVING_ORDER: tuple[int, ...] = (TIER_PAIR, TIER_USER, TIER_IMPUTED, TIER_ITEM)
N_TIERS = len(SERVING_ORDER) + 1  # width of the VM's one-hot tier input (tier 0 included)
TIER_NAMES = {TIER_NONE: "none", TIER_PAIR: "pair", TIER_USER: "user aggregate", TIER_IMPUTED: "imputed user",
              TIER_ITEM: "item aggregate"}
