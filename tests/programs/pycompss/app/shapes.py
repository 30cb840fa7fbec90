"""A helper module of the program in methods_collections.py."""


def area(side):
    return side * side
