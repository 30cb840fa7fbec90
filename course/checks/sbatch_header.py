"""A batch script's `#SBATCH` header read as sbatch reads it: only lines starting exactly `#SBATCH`, only before the
first command; short and long forms (`-N 2`, `--nodes=2`, `--nodes 2`) and unique prefixes of long names mean the
same; the last value given wins. What is not an sbatch option is kept as a slip to tell the learner.

    header = read(Path("job.sbatch").read_text())
    header.get("nodes"), header.line_of("time"), header.slips
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# sbatch's one-letter options and the long names they stand for; None: a flag that takes no value.
SHORT = {
    "A": "account",
    "a": "array",
    "b": "begin",
    "C": "constraint",
    "c": "cpus-per-task",
    "D": "chdir",
    "d": "dependency",
    "e": "error",
    "G": "gpus",
    "H": None,
    "i": "input",
    "J": "job-name",
    "k": None,
    "L": "licenses",
    "M": "clusters",
    "m": "distribution",
    "N": "nodes",
    "n": "ntasks",
    "O": None,
    "o": "output",
    "p": "partition",
    "q": "qos",
    "Q": None,
    "s": None,
    "S": "core-spec",
    "t": "time",
    "v": None,
    "W": None,
    "w": "nodelist",
    "x": "exclude",
}
SHORT_FLAGS = {
    "H": "hold",
    "k": "no-kill",
    "O": "overcommit",
    "Q": "quiet",
    "s": "oversubscribe",
    "v": "verbose",
    "W": "wait",
}
# Long options that take a value, and those that take none (some of which may take one after '=').
WITH_VALUE = frozenset(
    """account array batch begin chdir clusters comment constraint container core-spec
cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency distribution error exclude
export export-file extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres
gres-flags hint input job-name licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu mem-per-gpu mincpus
network nice nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu ntasks-per-node ntasks-per-socket
open-mode output partition power priority profile propagate qos reservation signal sockets-per-node switches
thread-spec threads-per-core time time-min tmp tres-per-task uid wckey wrap""".split()
)
FLAGS = frozenset(
    """contiguous exclusive get-user-env hold ignore-pbs no-kill no-requeue overcommit oversubscribe
parsable quiet reboot requeue spread-job test-only use-min-nodes verbose wait wait-all-nodes""".split()
)


@dataclass
class Option:
    """One option of the header: its long name (None if sbatch knows no such option), value and line number."""

    name: str | None
    value: str | None
    line: int
    written: str


@dataclass
class Header:
    """A batch script as sbatch reads it: the options before the first command, the commands, and the slips."""

    options: list[Option] = field(default_factory=list)
    commands: list[tuple[int, str]] = field(default_factory=list)
    slips: list[str] = field(default_factory=list)
    shebang: bool = False

    def get(self, name: str) -> str | None:
        """The value sbatch would use for a long option (the last one given), '' for a flag, None if absent."""
        found = [o for o in self.options if o.name == name]
        return (found[-1].value or "") if found else None

    def line_of(self, name: str) -> int:
        return next((o.line for o in reversed(self.options) if o.name == name), 0)


def long_name(written: str) -> str | None:
    """sbatch's long option for `written` (a whole name, or a unique prefix of one, as getopt allows), else None."""
    known = WITH_VALUE | FLAGS
    if written in known:
        return written
    matches = [name for name in known if name.startswith(written)]
    return matches[0] if len(matches) == 1 else None


def read(text: str) -> Header:
    """Read a batch script's `#SBATCH` lines the way sbatch does (up to the first command); never raises."""
    header = Header()
    lines = text.splitlines()
    header.shebang = bool(lines) and lines[0].startswith("#!")
    in_header = True
    pending, start = "", 0
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if in_header:
            if line.startswith("#SBATCH"):
                read_options(line[len("#SBATCH") :], number, header)
                continue
            if re.match(r"^#\s*sbatch\b", line, re.IGNORECASE):
                header.slips.append(
                    f"line {number} '{line[:40]}' is an ordinary comment: sbatch reads only lines "
                    f"that start exactly with '#SBATCH' (no space, capitals)"
                )
                continue
            if not line or line.startswith("#"):
                continue
            in_header = False
        if line.startswith("#SBATCH"):
            header.slips.append(
                f"line {number} '{line[:40]}' comes after the first command (line "
                f"{header.commands[0][0] if header.commands else number}): sbatch ignores it - "
                f"put every #SBATCH line before the first command"
            )
            continue
        if not line or line.startswith("#"):
            continue
        start = start or number
        pending = f"{pending} {line.removesuffix(chr(92)).strip()}".strip()
        if not line.endswith("\\"):
            header.commands.append((start, pending))
            pending, start = "", 0
    if pending:
        header.commands.append((start, pending))
    return header


def read_options(rest: str, number: int, header: Header) -> None:
    """Add the options written in REST (one `#SBATCH` line's words, or srun's, which share sbatch's names) to
    HEADER as line NUMBER's, and a slip for each word that is not an option."""
    try:
        words = shlex.split(rest, comments=True)
    except ValueError:
        header.slips.append(f"line {number}: unbalanced quotes in '#SBATCH{rest[:40]}'")
        return
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--"):
            written, has_value, value = word[2:].partition("=")
            name = long_name(written)
            if name in WITH_VALUE and not has_value:
                value, has_value = (words[i], True) if i < len(words) else ("", False)
                i += 1 if has_value else 0
            header.options.append(Option(name, value if has_value else None, number, word))
            if name is None:
                header.slips.append(f"line {number}: --{written} is not an option sbatch knows (a typo?)")
        elif word.startswith("-") and len(word) >= 2 and word[1] in SHORT:
            letter = word[1]
            if SHORT[letter] is None:
                header.options.append(Option(SHORT_FLAGS[letter], None, number, word))
                continue
            value = word[2:].lstrip("=")
            if not value and i < len(words):
                value = words[i]
                i += 1
            header.options.append(Option(SHORT[letter], value, number, word))
        else:
            header.options.append(Option(None, None, number, word))
            header.slips.append(f"line {number}: '{word}' is not an sbatch option (options start with - or --)")
