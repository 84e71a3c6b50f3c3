"""The course built from the teaching notebooks: the exercises' solutions (``course.solutions``, imported by the
notebooks and checked by tests/test_course.py) and the static site (``python -m course.build``, ``make site``)."""
