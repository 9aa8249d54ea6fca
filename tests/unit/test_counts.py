"""How messages write a count and its noun, and a list cut short: one way everywhere."""

from __future__ import annotations

from ragscore_workers.counts import (
    agree,
    and_more,
    counted,
    counted_of,
    did_you_mean,
    listed,
    noun,
    noun_names,
    thousands,
)


def test_counted_writes_thousands_separators_and_the_plural_unless_one() -> None:
    assert [counted(n, "row") for n in (0, 1, 2, 1200)] == ["0 rows", "1 row", "2 rows", "1,200 rows"]
    assert counted(2, "reply", "replies") == "2 replies"


def test_listed_names_the_first_few_and_counts_the_rest_with_separators() -> None:
    assert listed(["a", "b"], 5) == "a, b"
    assert listed([], 5) == ""
    assert listed(["a", "b", "c", "d"], 3) == "a, b, c and 1 more"
    assert listed([str(i) for i in range(1210)], 6) == "0, 1, 2, 3, 4, 5 and 1,204 more"
    # names holding only the first few of a total counted elsewhere
    assert listed(["x", "y"], 5, total=2_002, sep="; ") == "x; y and 2,000 more"
    assert listed(["x", "y"], 5, total=2) == "x, y"


def test_listed_with_nothing_shown_has_no_leading_space() -> None:
    """``listed(names, 0)`` said " and 3 more", a leading space and an "and" after nothing."""
    assert listed(["a", "b", "c"], 0) == "3 more"
    assert listed([], 5, total=3) == "3 more"
    assert listed(["a", "b", "c"], 0, more="id") == "3 ids"


def test_listed_says_what_the_rest_are_when_told() -> None:
    """It said "id 'q4' on lines 5 and 12 and 2 more", which read as two more lines: the rest are named."""
    assert listed(["a", "b", "c"], 2, more="duplicate id") == "a, b and 1 more duplicate id"
    assert listed(["a", "b", "c", "d"], 2, more="duplicate id") == "a, b and 2 more duplicate ids"
    assert listed(["a"], 2, more="duplicate id") == "a"


def test_noun_is_the_noun_alone_plural_unless_one() -> None:
    assert [noun(n, "column") for n in (0, 1, 2)] == ["columns", "column", "columns"]
    assert noun(2, "reply", "replies") == "replies"


def test_noun_names_quotes_each_name_after_its_noun() -> None:
    """Messages said "column(s) 'a'" and "unknown key(s) ['kind']"."""
    assert noun_names(["a"], "column") == "column 'a'"
    assert noun_names(["kind", "score"], "key") == "keys 'kind', 'score'"


def test_agree_is_the_singular_word_for_one_and_the_plural_else() -> None:
    """Verbs and pronouns were chosen by hand beside each count (``'is' if one else 'are'``)."""
    assert [agree(n, "is", "are") for n in (0, 1, 2, 1200)] == ["are", "is", "are", "are"]
    assert agree(1, "it", "them") == "it"


def test_counted_of_is_a_part_of_a_whole_whose_noun_agrees_with_the_whole() -> None:
    """Messages wrote "N of M items" by hand: "0 of 1 items scored", "sent 1200 of 5000 rows"."""
    assert counted_of(0, 1, "item") == "0 of 1 item"
    assert counted_of(1_200, 5_000, "row") == "1,200 of 5,000 rows"
    assert counted_of(1, 2, "extra point") == "1 of 2 extra points"


def test_and_more_ends_a_list_as_listed_does() -> None:
    """``(and N more point)`` was built beside :func:`listed`'s own "and N more"."""
    assert and_more(1, "point") == "and 1 more point" and and_more(2, "point") == "and 2 more points"
    assert and_more(1_204) == "and 1,204 more" == listed([str(i) for i in range(1_205)], 1)[len("0 ") :]


def test_did_you_mean_quotes_each_name_as_every_typo_hint_does() -> None:
    """Each typo's "did you mean" (an unknown metric, a suite key, a gate, a column) was built where it was said."""
    assert did_you_mean(["rpm", "rpd"]) == "did you mean 'rpm' or 'rpd'?"
    assert did_you_mean(["exact_match"], sentence=True) == "Did you mean 'exact_match'?"
    assert did_you_mean([]) == "" == did_you_mean([], sentence=True)


def test_thousands_writes_a_count_as_counted_does_without_its_noun() -> None:
    assert [thousands(n) for n in (0, 999, 1000, 1_234_567)] == ["0", "999", "1,000", "1,234,567"]
