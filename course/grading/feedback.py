"""nbgrader's `generate_feedback` without the hidden tests (set in nbgrader_config.py).

nbgrader's feedback is the autograded notebook as HTML, hidden tests and their tracebacks included, so a
learner would read the instructor's hidden checks. This preprocessor removes the hidden-test regions
(nbgrader's own ClearHiddenTests) and, in those cells, replaces each error's traceback, which quotes the
failing line, by the error's one-line message: the learner still sees what failed, in the check's words.
"""

from __future__ import annotations

from nbgrader.preprocessors import ClearHiddenTests


class HideHiddenTests(ClearHiddenTests):
    """ClearHiddenTests for feedback: hidden regions removed, tracebacks of those cells cut to their message."""

    def preprocess_cell(self, cell, resources, cell_index):
        hidden = self.begin_test_delimeter in cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if hidden:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    message = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".rstrip(": ")
                    output["traceback"] = [message]
        return cell, resources
