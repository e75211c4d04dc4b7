"""The order the suite's tests start in."""


def scripts_first(items):
    """tests/scripts/ first: its end-to-end runs take half a minute to two minutes each, and
    started last they would leave one pytest-xdist worker running them alone at the end."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/scripts/"))
