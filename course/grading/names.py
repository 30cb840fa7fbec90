"""Learners' names in nbgrader's gradebook, from their Unix accounts (a hub's PAM logins).

nbgrader adds each student it autogrades without a name, and Formgrader then lists them as "None, None". Autograde
runs `NameStudent` first (course/grading/nbgrader_course.py): a student without a name gets their account's full
name (the GECOS field `useradd -c "Ada Lovelace"` sets), else the account name. Names given in Formgrader stay.
"""

from __future__ import annotations

import pwd

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor


def account_name(student_id: str) -> tuple[str, str]:
    """(first, last) name of the Unix account STUDENT_ID: "Ada Lovelace,,," -> ("Ada", "Lovelace"); without a full
    name (or an account), ("", STUDENT_ID)."""
    try:
        full = pwd.getpwnam(student_id).pw_gecos.split(",")[0].strip()
    except KeyError:
        full = ""
    first, _, last = (full or student_id).rpartition(" ")
    return first, last


class NameStudent(NbGraderPreprocessor):
    """Give the student being autograded their account's name where the gradebook has none."""

    def preprocess(self, nb, resources):
        student_id, db_url = resources["nbgrader"]["student"], resources["nbgrader"]["db_url"]
        with Gradebook(db_url) as gradebook:
            try:
                student = gradebook.find_student(student_id)
            except MissingEntry:
                return nb, resources  # nbgrader adds the student itself (and refuses an unknown one where told to)
            if not student.first_name and not student.last_name:
                first, last = account_name(student_id)
                gradebook.update_or_create_student(student_id, first_name=first, last_name=last)
        return nb, resources
