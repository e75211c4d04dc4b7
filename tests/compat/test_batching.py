"""fairseq drops the last incomplete batch of every split; the plugin keeps it."""

import numpy as np
from fairseq.data import data_utils

import fairseq_sparse
fairseq_sparse.load_plugin()  # applies the fix


def test_every_example_is_batched():
    sizes = np.array([71, 54, 47, 19, 114, 112, 102, 48, 112, 59, 92, 65, 76, 64, 37, 72, 118, 55, 18, 76])
    order = np.argsort(sizes, kind="mergesort")
    for max_tokens, max_sentences in ((None, 1), (12000, None), (300, None), (None, 5)):
        batches = data_utils.batch_by_size(order, num_tokens_fn=lambda i: sizes[i], num_tokens_vec=sizes[order],
                                           max_tokens=max_tokens, max_sentences=max_sentences,
                                           required_batch_size_multiple=8)
        assert sorted(int(i) for b in batches for i in b) == list(range(20)), (max_tokens, max_sentences)
