"""The model's layers: GQA attention over the paged pool, the lightning indexer, the
mixture-of-experts feed-forward and the dense MLP, and the exp, softmax and SiLU their
inference passes compute with (fast_math). model.py stacks them into the decoder."""
