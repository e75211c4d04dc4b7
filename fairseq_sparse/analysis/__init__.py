"""Analysis of sparse attention: statistics per head and the attention report command."""
