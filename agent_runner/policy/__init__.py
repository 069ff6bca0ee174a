"""The policy side: the model seam, the SGLang and chat clients, token bookkeeping and snapshots."""
