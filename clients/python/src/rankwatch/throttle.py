"""How often the client repeats itself in the log: at most one warning per
subject (a rejection reason, a failing stream) per interval, the others
counted and their number given in the next warning of that subject, or at
close.

A server that is down, or a serving bug that sends the same bad event a
thousand times a second, then costs a line every few seconds, not a flood.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

#: The default: at most one warning per subject every 10 seconds.
DEFAULT_INTERVAL_S = 10.0


class Throttle:
    """Admits one report per subject per `interval` seconds and counts the rest."""

    def __init__(self, interval: float = DEFAULT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        """A throttle of `interval` seconds (0: admit everything), timed by `clock`."""
        if interval < 0:
            raise ValueError("the log interval must not be negative")
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: Dict[str, float] = {}
        self._suppressed: Dict[str, int] = {}

    @property
    def interval(self) -> float:
        """The seconds between two reports of one subject."""
        return self._interval

    def admit(self, subject: str, count: int = 1) -> Optional[int]:
        """Whether `count` new occurrences of `subject` may be reported now.

        Returns `None` when not (they are counted), otherwise how many
        occurrences were counted since the subject's last report (0 for none).
        """
        now = self._clock()
        with self._lock:
            last = self._last.get(subject)
            if last is not None and now - last < self._interval:
                self._suppressed[subject] = self._suppressed.get(subject, 0) + count
                return None
            self._last[subject] = now
            return self._suppressed.pop(subject, 0)

    def drain(self) -> List[Tuple[str, int]]:
        """The subjects with occurrences not reported yet, and their counts,
        sorted by subject; they are forgotten."""
        with self._lock:
            left, self._suppressed = self._suppressed, {}
        return sorted(left.items())

    def warn(self, log: logging.Logger, subject: str, message: str, *args: object, count: int = 1) -> None:
        """Logs `message % args` to `log` at WARNING unless a warning about
        `subject` was logged less than the interval ago; then the `count`
        occurrences are counted, and their number added to the next one."""
        earlier = self.admit(subject, count)
        if earlier is None:
            return
        if earlier:
            message += " (and %d more %s since the last such warning)"
            args += (earlier, subject)
        log.warning(message, *args, stacklevel=2)

    def warn_left(self, log: logging.Logger) -> None:
        """Logs how many occurrences of each subject were not logged yet (at close)."""
        for subject, count in self.drain():
            log.warning("rankwatch: %d more %s not logged since the last such warning", count, subject, stacklevel=2)
