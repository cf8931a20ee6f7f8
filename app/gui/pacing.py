"""Frame pacing: the worker's publishing schedule and the UI's drawing schedule.

Both keep a schedule of one frame per interval instead of waiting an interval after the last
frame. Waiting after the last frame loses frames to quantisation: batches of steps a little
shorter than the interval publish every other batch, and a UI timer that polls every 16 ms
draws at most every 48 ms when the interval is 33 ms (20.8 frames/s for a 30 frames/s cap).
"""
from __future__ import annotations

UI_POLL_S = 0.016  # the main window's timer: how often the UI looks for a new packet (at most)


def poll_interval(fps: float) -> float:
    """How often the UI looks for a new packet at a frame cap of ``fps``: every UI_POLL_S, or twice a
    frame interval where that is shorter. A poll as long as the interval (16 ms at 60) loses a frame
    whenever the newest packet's event is a little late at the poll: the next poll is a whole frame
    later (the 1M-particle dam break drew 42 of its 54 packets a second at a cap of 60)."""
    return min(UI_POLL_S, 0.5 / fps)


def publish_schedule(last: float, now: float, interval: float) -> float:
    """The schedule time of a frame published at ``now`` when the previous one was due at ``last``
    (the next is due ``interval`` after the returned time).

    Frames keep a schedule of one per interval rather than waiting an interval after the last
    one: batches of steps a little shorter than the interval would otherwise publish every other
    batch (1M-particle SPH: 30 ms batches gave 20 frames/s, not 30). The schedule lags ``now`` by
    one interval at most, so a stall is not followed by a burst, and a frame published early (a
    forced one: a step, a view change) moves it to ``now``."""
    return min(max(last + interval, now - interval), now)


class FramePacer:
    """At most ``fps`` frames a second, on a fixed schedule, for a caller that polls every
    ``poll_s`` seconds: a frame is due within half a poll of its scheduled time, so over time the
    frames come at the full rate whatever the poll's phase."""

    def __init__(self, fps: float, poll_s: float):
        self.interval = 1.0 / fps
        self.tolerance = 0.5 * poll_s
        self.t = float("-inf")  # the schedule time of the last frame

    def due(self, now: float) -> bool:
        return now >= self.t + self.interval - self.tolerance

    def drawn(self, now: float) -> None:
        """A frame was drawn at ``now``: the next is due one interval after its schedule time,
        which lags ``now`` by half an interval at most (after a pause: no burst of frames)."""
        self.t = max(self.t + self.interval, now - 0.5 * self.interval)
