"""Measuring a notebook's checks (instructor-only: the student copy leaves this folder out).

`trials` runs a notebook once with many answers tried in place, just before their exercise (the strength test's
way, tests/answer_trials.py); `operators` makes mutants of the solution code of an answer cell with `ast`;
`report` runs them and tells, per exercise, how many mutants the visible check and the hidden tests catch
(`python -m course mutation-report`; docs/guide/08-measure.md, "Measuring an exercise's checks").
"""
