import pytest

from fairseq_sparse.markdown import table


def test_table_renders_rows_and_refuses_a_row_of_another_width():
    assert table(["a", "b"], [[1, "x"], [2.5, ""]]) == "| a | b |\n| --- | --- |\n| 1 | x |\n| 2.5 |  |"
    assert table(["a"], []) == "| a |\n| --- |"
    with pytest.raises(ValueError, match=r"has 1 cells, the header 2"):
        table(["a", "b"], [["only one"]])
