"""A progress display for the long commands (``mixmla bench``, ``mixmla eval``).

On a terminal: a live bar (rich, else tqdm) on stderr with a description the command updates as it
goes. Elsewhere (logs, CI, a pipe): nothing live, and each finished item's line is printed, so the
log shows where a run is.
"""

from __future__ import annotations

import sys


class Progress:
    """``total`` items under ``title``. ``describe(text)``: what runs now (live display only);
    ``done(line, show=False)``: one item finished; ``line`` (or None) is printed where there is no
    live display, and above it too when ``show`` (a failure, say). ``live``: force the live display
    on or off (default: when stderr is a terminal)."""

    def __init__(self, total: int, title: str, live: bool | None = None):
        self.total, self.k = total, 0
        self._rich = self._tqdm = None
        if not (sys.stderr.isatty() if live is None else live):
            return
        try:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)

            self._rich = RichProgress(SpinnerColumn(), TextColumn("{task.description:<40}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True))
            self._rich.start()
            self._task = self._rich.add_task(title, total=total)
        except ImportError:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True, desc=title)
            except ImportError:
                pass

    @property
    def live(self) -> bool:
        return self._rich is not None or self._tqdm is not None

    def describe(self, text: str) -> None:
        if self._rich is not None:
            self._rich.update(self._task, description=text)
        elif self._tqdm is not None:
            self._tqdm.set_description(text)

    def done(self, line: str | None = None, show: bool = False) -> None:
        self.k += 1
        if self._rich is not None:
            self._rich.advance(self._task)
            if show and line:
                self._rich.console.print(line, markup=False, highlight=False)
        elif self._tqdm is not None:
            self._tqdm.update(1)
            if show and line:
                self._tqdm.write(line)
        elif line:
            print(line, flush=True)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
        elif self._tqdm is not None:
            self._tqdm.close()
