"""Serving tiers: the codes the resolver returns with every value and the VM reads as an input.

Kept in one module of the frame (no imports) so the resolver, the models and the evaluation agree
on the codes without the model layer importing the serving layer. Codes follow the serving order,
best expected quality first: the resolver tries tier 1, then 2, ...; ``TIER_NONE`` means nothing
servable (zero vector), so "tiers up to k" is ``1 <= tier <= k``.
"""

TIER_NONE = 0
TIER_PAIR = 1  # the FM's own pair embedding, speculated and scored ahead of time
TIER_NEIGHBOR_PAIR = 2  # the same item's pair embeddings of the user's KNN neighbours (item-specific)
TIER_USER = 3  # the user's mean pair embedding over the last window
TIER_IMPUTED = 4  # imputed from the user's KNN neighbours' aggregates
TIER_ITEM = 5  # the item's mean pair embedding over the last window: the first tier for a brand-new user
TIER_IMPUTED_ITEM = 6  # imputed from the nearest items (FM item space) that have an item aggregate

SERVING_ORDER: tuple[int, ...] = (TIER_PAIR, TIER_NEIGHBOR_PAIR, TIER_USER, TIER_IMPUTED, TIER_ITEM,
                                  TIER_IMPUTED_ITEM)
N_TIERS = len(SERVING_ORDER) + 1  # width of the VM's one-hot tier input (tier 0 included)
TIER_NAMES = {TIER_NONE: "none", TIER_PAIR: "pair", TIER_NEIGHBOR_PAIR: "neighbour pair", TIER_USER: "user aggregate",
              TIER_IMPUTED: "imputed user", TIER_ITEM: "item aggregate", TIER_IMPUTED_ITEM: "imputed item"}
