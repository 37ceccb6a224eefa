"""highway-env's offscreen scene, drawn at less cost and with the same pixels.

Drawing a frame of the default 600x150 view took 0.75 ms on an AMD EPYC (family 26) in
`EnvViewer.display()`, four fifths of it in the lane markings: `LaneGraphics.draw_stripes`
converts each stripe's two ends to pixels one at a time in Python (`lane.position`, then
`surface.vec2pix`), about 125 stripes per frame on the presets' three-lane road, most of
them outside the view.
`FrameViewer` draws straight lanes with the same float64 arithmetic on arrays, skips the
stripes that lie wholly outside the surface, and leaves the rest of the scene (other lane
kinds, vehicles, objects) to highway-env's own code: the surface's pixels are those of
`EnvViewer.display()` (tests/unit/test_driving_env.py compares them over whole episodes).

Imports highway_env: load it only where an env with frames is made (the `highway` extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pygame
from highway_env.envs.common.graphics import EnvViewer, ObservationGraphics
from highway_env.road.graphics import LaneGraphics, RoadGraphics, WorldSurface
from highway_env.road.lane import LineType, StraightLane


class FrameViewer(EnvViewer):  # type: ignore[misc]
    """An offscreen `EnvViewer` whose `display()` draws the scene as highway-env's does,
    with `draw_road` for the road. No window, trajectory or agent display: a frame source."""

    def display(self) -> None:
        surface = self.sim_surface
        surface.move_display_window_to(self.window_position())
        draw_road(self.env.road, surface)
        RoadGraphics.display_road_objects(self.env.road, surface, offscreen=True)
        RoadGraphics.display_traffic(
            self.env.road,
            surface,
            simulation_frequency=self.env.config["simulation_frequency"],
            offscreen=True,
        )
        ObservationGraphics.display(self.env.observation_type, surface)


def draw_road(road: Any, surface: WorldSurface) -> None:
    """`RoadGraphics.display(road, surface)`: the ground, then every lane's markings, a
    `StraightLane`'s (not a subclass's) by `draw_straight_lane`, others by highway-env."""
    surface.fill(surface.GREY)
    for ends in road.network.graph.values():
        for lanes in ends.values():
            for lane in lanes:
                if type(lane) is StraightLane:
                    draw_straight_lane(lane, surface)
                else:
                    LaneGraphics.display(lane, surface)


def draw_straight_lane(lane: StraightLane, surface: WorldSurface) -> None:
    """`LaneGraphics.display(lane, surface)` for a straight lane: the same stripes at the
    same pixels (highway-env's arithmetic, in the same order, on arrays)."""
    g = LaneGraphics
    count = int(
        2 * (surface.get_height() + surface.get_width()) / (g.STRIPE_SPACING * surface.scaling)
    )
    s_origin, _ = lane.local_coordinates(surface.origin)
    s0 = (int(s_origin) // g.STRIPE_SPACING - count // 2) * g.STRIPE_SPACING
    steps = np.arange(count) * g.STRIPE_SPACING
    for side in range(2):
        kind = lane.line_types[side]
        if kind == LineType.STRIPED:
            starts, ends = s0 + steps, s0 + steps + g.STRIPE_LENGTH
        elif kind == LineType.CONTINUOUS:
            starts, ends = s0 + steps, s0 + steps + g.STRIPE_SPACING
        elif kind == LineType.CONTINUOUS_LINE:
            starts = np.array([s0 + 0 * g.STRIPE_SPACING])
            ends = np.array([s0 + count * g.STRIPE_SPACING + g.STRIPE_LENGTH])
        else:
            continue
        lateral = (side - 0.5) * lane.width_at(starts[0])  # a straight lane's width is constant
        draw_stripes(lane, surface, starts, ends, lateral)


def draw_stripes(
    lane: StraightLane,
    surface: WorldSurface,
    starts: np.ndarray,
    ends: np.ndarray,
    lateral: float,
) -> None:
    """`LaneGraphics.draw_stripes` on a straight lane at one lateral offset: stripes shorter
    than half a stripe after clipping to the lane are dropped, as there; so are those whose
    both ends lie beyond one side of the surface by more than the line's width (pygame
    would draw none of their pixels)."""
    starts = np.clip(starts, 0, lane.length)
    ends = np.clip(ends, 0, lane.length)
    keep = np.abs(starts - ends) > 0.5 * LaneGraphics.STRIPE_LENGTH
    width = max(surface.pix(LaneGraphics.STRIPE_WIDTH), 1)
    a = _pixels(lane, surface, starts[keep], lateral)
    b = _pixels(lane, surface, ends[keep], lateral)
    size = np.array(surface.get_size())
    outside = ((a < -width) & (b < -width)) | ((a > size + width) & (b > size + width))
    lines = np.concatenate([a, b], axis=1)[~outside.any(axis=1)]
    for ax, ay, bx, by in lines.tolist():  # Python ints, as pygame is fastest given
        pygame.draw.line(surface, surface.WHITE, (ax, ay), (bx, by), width)


def _pixels(
    lane: StraightLane, surface: WorldSurface, longitudinal: np.ndarray, lateral: float
) -> np.ndarray:
    """[n, 2] int pixels of the lane points at `longitudinal` (m) and `lateral`: the
    values of `surface.vec2pix(lane.position(s, lateral))` for each s (`int()` truncates
    toward zero, as `np.trunc`)."""
    world = lane.start + longitudinal[:, None] * lane.direction + lateral * lane.direction_lateral
    return np.trunc((world - surface.origin) * surface.scaling).astype(np.int64)
