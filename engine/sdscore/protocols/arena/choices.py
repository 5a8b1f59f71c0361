"""The values the arena audio judge's settings may take, light enough for `sdscore --help`."""

#: the orders each battle is judged in: both (A-B and B-A), as shown (A-B), or one seeded random order
ORDERS = ("both", "shown", "random")
