"""Automatic post-editing (Correia & Martins, ACL 2019): the triplet format, the ``ape``
task, the BERT-initialised ``bert_ape`` and the ``dual_source_transformer`` baseline,
``--scoring ter``, :class:`~.postedit.PostEditor` and the binarizer."""

from .. import compat

compat.apply()  # before the line's modules import what it fixes

from . import bert_ape, dual_source_transformer, task, ter  # noqa: E402,F401  (registration)
