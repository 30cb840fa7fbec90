"""nbgrader's exchange as the course runs it: a submission too large for the exchange is refused in one line that
says what to do, in a terminal (`nbgrader submit`) and in JupyterLab's Assignment List.

nbgrader 0.9 refuses a folder over `CourseDirectory.max_dir_size` (100 MB) with a bare RuntimeError, which its
Assignment List shows as a whole traceback (it shows every failure that way). `Submit` refuses it first, with an
ExchangeError the terminal prints as one line; the server extension (enabled on the hub by scripts/setup-hub.sh)
makes the Assignment List show an ExchangeError's message alone.
"""

from __future__ import annotations

from nbgrader.exchange.abc.exchange import ExchangeError
from nbgrader.exchange.default.submit import ExchangeSubmit


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


class Submit(ExchangeSubmit):
    """nbgrader's submit, refusing a folder larger than the exchange takes before copying anything."""

    def do_copy(self, src, dest, log=None):
        size, limit = self.get_size(src), 1000 * self.coursedir.max_dir_size
        if size > limit:
            self.fail(
                f"{self.coursedir.assignment_id} is not submitted: its folder {src} holds {_megabytes(size)}, more "
                f"than the {_megabytes(limit)} a submission may hold. Move data files and checkpoints out of it "
                "(only the notebooks are graded), then submit again."
            )
        super().do_copy(src, dest, log)


def one_line(value: str) -> str:
    """An exchange's refusal as its message alone, from the traceback nbgrader's Assignment List reports; any other
    failure as it is (a traceback is then the one clue)."""
    lines = value.strip().splitlines()
    name = f"{ExchangeError.__module__}.{ExchangeError.__qualname__}: "
    return lines[-1][len(name) :] if lines and lines[-1].startswith(name) else value


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "course.grading.exchange"}]


def _load_jupyter_server_extension(serverapp) -> None:
    """The Assignment List of this server reports an exchange's refusal (a Submit's) as one line."""
    from nbgrader.server_extensions.assignment_list import handlers

    class AssignmentList(handlers.AssignmentList):
        def submit_assignment(self, course_id, assignment_id):
            result = super().submit_assignment(course_id, assignment_id)
            return result if result["success"] else {**result, "value": one_line(result["value"])}

    # nbgrader's extension makes its manager from this name when it loads (after this one: extensions load by name);
    # one it made already is replaced.
    handlers.AssignmentList = AssignmentList
    settings = serverapp.web_app.settings
    if "assignment_list_manager" in settings:
        settings["assignment_list_manager"] = AssignmentList(parent=serverapp)
        settings["assignment_list_manager"].root_dir = serverapp.root_dir
