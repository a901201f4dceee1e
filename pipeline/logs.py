"""Log records for people: a warning that repeats (one per frame looked at) is shown once.

``RepeatFilter`` sits on the command line's log handler. A WARNING record whose
message template (``record.msg``, before its arguments are filled in) and logger it has
already passed ``limit`` times is dropped and counted; ``summary()`` names what was hidden.
Other levels always pass (INFO progress lines repeat on purpose). ``vid2sim --verbose`` does not install it, so every record shows.
"""
from __future__ import annotations

import logging
from collections import Counter


class RepeatFilter(logging.Filter):
    """Pass the first ``limit`` WARNING records of each (logger, template); count the rest."""

    def __init__(self, limit: int = 1):
        super().__init__()
        self.limit = limit
        self.passed: Counter = Counter()
        self.hidden: Counter = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        key = (record.name, str(record.msg))
        if self.passed[key] < self.limit:
            self.passed[key] += 1
            return True
        self.hidden[key] += 1
        return False

    def summary(self) -> str | None:
        """One line naming how many repeats were hidden and the first words of each, or None."""
        if not self.hidden:
            return None
        parts = [f"{n} x '{msg[:48]}...'" if len(msg) > 48 else f"{n} x '{msg}'"
                 for (_, msg), n in self.hidden.most_common()]
        return f"{sum(self.hidden.values())} repeated log lines hidden (--verbose shows them): " + "; ".join(parts)
