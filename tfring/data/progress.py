"""The converter's progress: records and bytes written, shown as a tqdm bar when wanted."""

import threading
import time


class Progress:
    """A tqdm bar with records/s and MB/s when tqdm is there and wanted; a thread-safe counter always.

    Args:
        total: the records expected.
        enabled: show a bar (when tqdm is installed).

    Example:

    >>> progress = Progress(1000, enabled=False)
    >>> progress.add(10, 4096)
    >>> progress.records, progress.bytes
    (10, 4096)
    """

    def __init__(self, total, enabled):
        self.records = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self._start = time.perf_counter()
        self._bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="rec", unit_scale=True, smoothing=0.1, dynamic_ncols=True)
            except ImportError:
                pass

    def add(self, records, size):
        """Counts `records` more records of `size` bytes in all."""
        with self._lock:
            self.records += records
            self.bytes += size
            if self._bar is not None:
                self._bar.update(records)
                elapsed = max(time.perf_counter() - self._start, 1e-9)
                self._bar.set_postfix_str(f"{self.bytes / elapsed / 1e6:.1f} MB/s", refresh=False)

    def close(self):
        """Closes the bar; returns the seconds since the start."""
        if self._bar is not None:
            self._bar.close()
        return time.perf_counter() - self._start
