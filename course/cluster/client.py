"""The ipyparallel `Client` the course's clusters use: ipyparallel's own, with a clear error for work sent to a dead
engine and calls that fail at once (ClusterDown) once the cluster's controller is gone.

Written for ipyparallel 9.2.0 (pinned in pyproject.toml and environment.yml). These override private methods of
ipyparallel's Client (`_send`, `_build_targets`, `_handle_apply_reply`, `_closed`, `_io_loop`, `outstanding`) and
DirectView (`_really_apply`) and swap a view's `__class__`, and wrap AsyncResult's `_iopub_streaming_output_callback`: check each against a new ipyparallel before moving the pin
(tests/test_cluster.py starts real clusters and kills their engines and controllers).
"""

from __future__ import annotations

import time

from course.cluster.errors import ClusterDown, EngineLost


def client_class() -> type:  # noqa: C901 - it holds the two classes, built on first use (docstring)
    """ipyparallel's Client with the course's overrides. Over 60 lines because it holds the two classes: they are
    built on first use so that importing course.cluster (the command line, the notebooks) does not import ipyparallel."""
    import ipyparallel as ipp
    from ipyparallel.client.view import DirectView
    from ipyparallel.error import CompositeError

    _stream_each_engine_apart()

    class View(DirectView):
        """ipyparallel's DirectView; a call that several engines answer with ClusterDown raises it once."""

        def _really_apply(self, *args, **kwargs):
            try:
                return super()._really_apply(*args, **kwargs)
            except CompositeError as exc:
                reasons = {str(e[1]) for e in exc.elist if e[0] == "ClusterDown"}
                if len(reasons) == 1 and all(e[0] == "ClusterDown" for e in exc.elist):
                    raise ClusterDown(reasons.pop()) from None
                raise

    class Client(ipp.Client):
        """ipyparallel's Client, with a clear error when work is sent to an engine that died, and calls that fail
        at once (ClusterDown) instead of waiting for ever once the cluster's controller is gone."""

        _course_down = None  # set by Cluster._watch: why the cluster can no longer run work, or ""

        def direct_view(self, targets="all", **kwargs):
            view = super().direct_view(targets, **kwargs)
            if type(view) is DirectView:
                view.__class__ = View
            return view

        def _send(self, *args, **kwargs):
            why = self._course_down() if self._course_down is not None and not self._closed else ""
            if why:
                raise ClusterDown(why)
            return super()._send(*args, **kwargs)

        def course_watch(self, down, interval: float = 1.0) -> None:
            """Check every `interval` s, while calls wait, that the cluster still runs; fail them if not."""
            import threading

            self._course_down = down

            def watch():
                while not self._closed:
                    time.sleep(interval)
                    if self.outstanding and not self._closed:
                        why = down()
                        if why:
                            self._io_loop.add_callback(self._course_fail, why)
                            time.sleep(interval)

            threading.Thread(target=watch, daemon=True, name="course-cluster-watch").start()

        def _course_fail(self, why: str) -> None:
            """Answer every waiting call with a ClusterDown error (runs in the client's IO thread), the way
            ipyparallel answers calls that were on an engine that died."""
            for msg_id in list(self.outstanding):
                content = {
                    "status": "error",
                    "ename": "ClusterDown",
                    "evalue": why,
                    "traceback": [f"ClusterDown: {why}"],
                    "engine_info": {},
                }
                msg = self.session.msg("apply_reply", content=content)
                msg["parent_header"]["msg_id"] = msg_id
                self._handle_apply_reply(msg)

        def _build_targets(self, targets):
            try:
                return super()._build_targets(targets)
            except (KeyError, IndexError) as exc:
                live = self.ids
                wanted = (
                    [targets]
                    if isinstance(targets, int)
                    else list(targets)
                    if isinstance(targets, (list, tuple, range))
                    else []
                )
                gone = [t for t in wanted if t not in live] or [exc.args[0] if exc.args else "?"]
                raise EngineLost(
                    f"engine(s) {', '.join(map(str, gone))} no longer running (killed or crashed); live engines: "
                    f"{live or 'none'}. See cluster.status(); restart the engines with cluster.restart()"
                ) from None

    return Client


def _stream_each_engine_apart() -> None:
    """In a kernel, %%px shows each engine's output as a display keyed by its request; output that arrived before the
    cell began streaming is replayed without that key, so every engine got the same one and only the last was shown."""
    from ipyparallel.client.asyncresult import AsyncResult

    callback = AsyncResult._iopub_streaming_output_callback
    if getattr(callback, "course_keyed", False):
        return

    def keyed(self, eid, msg_future, msg):
        if not msg.get("parent_header", {}).get("msg_id"):
            msg = {**msg, "parent_header": {"msg_id": msg_future.msg_id}}
        return callback(self, eid, msg_future, msg)

    keyed.course_keyed = True
    AsyncResult._iopub_streaming_output_callback = keyed
