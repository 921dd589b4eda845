"""Rendering the built-in world's forward camera: a pinhole over a flat ground plane, vectorized numpy.

Geometry. The camera (:class:`drive.sim.camera.Camera`) is a pinhole on the
vehicle, pitched down; :mod:`drive.sim.camera` gives its frames and the projection of the ground.
Every image row below the horizon sees one forward distance X(v) and every pixel a fixed (X, Y)
ground point; the renderer precomputes them once per camera. Per frame it samples the road
centreline ahead in the vehicle frame, interpolates its lateral position, direction, arc length
and curvature at each row's X, and converts every pixel to Frenet coordinates (s, d) to second
order (``d = b - kappa a^2 / 2``). That row model cannot draw a road that runs across the view
(beyond a junction turn or a hairpin), so on ``hard`` roads each ground pixel takes (s, d) from the
road's nearest point (:mod:`drive.sim.road_nearest`); easy roads keep the row model. Shading is
lookup and arithmetic on those arrays: asphalt, paint (dashes from arc length), gravel shoulders,
verges (grass, leaves, snow), tree shadows as boxes in (s, d), haze ``1 - exp(-X / visibility)``,
and a sky gradient with a distant treeline above the horizon. Trees are billboards drawn far to near.

Antialiasing is analytic: every edge, line, dash and shadow is the exact box filter of the
pixel's ground footprint (lateral ``t/fx`` and longitudinal ``dX/dv`` metres), so distant
dashes fade to grey instead of flickering; ground texture fades with footprint like a
mip-map, and trees are drawn with ``cv2.LINE_AA``.

Arbitrary viewpoints: :func:`render_view` renders the world from any pose relative to the
lane, ``render_view(road, appearance, s_m, lateral_m=0.3, yaw_rad=0.05)`` = the camera
30 cm left of the right-lane centre at arc length ``s_m``, yawed 0.05 rad to the left. Data
augmentation (viewpoint synthesis by ground-plane homography) can be checked against it.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import cv2
import numpy as np

from drive.sim.appearance import Appearance
from drive.sim.camera import Camera
from drive.sim.road import Road
from drive.sim.road_nearest import NearestPoints, clamped_cell

__all__ = ["Renderer", "render_view"]

_FAR_M = 250.0  # road sampled this far ahead; beyond, haze covers the ground
_SHADOW_RES = 0.15  # m per shadow-map cell
_SUBPIXEL_BITS = 8  # fixed-point fraction bits for antialiased cv2 drawing
_SHADOW_HALF_M = 16.0  # shadow map covers |d| < this
_TEX = 256  # texture side; a power of two, so wrapping an integer index is a bitwise and
_TEX_MASK = _TEX - 1


def _value_noise(rng: np.random.Generator, size: int, octaves: Tuple[int, ...]) -> np.ndarray:
    """Tileable fractal noise in [-1, 1], float32 [size, size]."""
    out = np.zeros((size, size), np.float32)
    for cells in octaves:
        grid = rng.uniform(-1.0, 1.0, (cells, cells)).astype(np.float32)
        tiled = np.tile(grid, (3, 3))
        up = cv2.resize(tiled, (3 * size, 3 * size), interpolation=cv2.INTER_CUBIC)
        out += up[size : 2 * size, size : 2 * size] / np.sqrt(cells)
    return out / np.abs(out).max()


def _cell(x: np.ndarray) -> np.ndarray:
    """Index of the unit cell holding ``x``, wrapped onto the periodic texture: floor first, then wrap the
    integer, so every finite value lands in [0, _TEX). (Wrapping the float first is wrong at the seam:
    on float32 ``np.mod(-1e-9, 256)`` is 256.0, one past the end.) Non-finite values land in the texture
    too instead of raising."""
    with np.errstate(invalid="ignore"):
        return np.floor(x).astype(np.int32) & _TEX_MASK


def _box(x: np.ndarray, edge: np.ndarray, inv_footprint: np.ndarray) -> np.ndarray:
    """Fraction of a pixel footprint (width ``1 / inv_footprint``) centred at ``x`` lying below ``edge``
    (exact box filter)."""
    v = (edge - x) * inv_footprint + 0.5
    np.minimum(v, 1.0, out=v)
    return np.maximum(v, 0.0, out=v)


def _shadow_map(road: Road, app: Appearance) -> np.ndarray:
    """Light factor over the whole road in (s, d) cells of ``_SHADOW_RES`` metres, float32 [S, D].

    Each tree casts an elliptical canopy shadow displaced away from the sun (0.7 x height /
    tan(elevation)) and stretched along the sun direction; edges are blurred (penumbra).
    """
    n_s = int(road.length_m / _SHADOW_RES) + 2
    n_d = int(2 * _SHADOW_HALF_M / _SHADOW_RES)
    cover = np.zeros((n_s, n_d), np.float32)
    cot = 1.0 / np.tan(app.sun_elevation_rad)
    ca, sa = np.cos(app.sun_azimuth_rad), np.sin(app.sun_azimuth_rad)
    stretch = min(1.0 / np.sin(app.sun_elevation_rad), 3.0)
    for o in road.objects:
        reach = 0.7 * o.height_m * cot
        cs, cd = o.s_m - reach * ca, o.d_m - reach * sa
        rs = o.radius_m * (1.0 + abs(ca) * (stretch - 1.0))
        rd = o.radius_m * (1.0 + abs(sa) * (stretch - 1.0))
        centre = (int((cd + _SHADOW_HALF_M) / _SHADOW_RES * 16), int(cs / _SHADOW_RES * 16))
        axes = (int(rd / _SHADOW_RES * 16), int(rs / _SHADOW_RES * 16))
        cv2.ellipse(cover, centre, axes, 0.0, 0.0, 360.0, 1.0, -1, cv2.LINE_8, 4)
    cover = cv2.GaussianBlur(cover, (0, 0), 0.4 / _SHADOW_RES)
    cover[:, [0, -1]] = 0.0  # outside the map: no shadow
    return 1.0 - app.shadow_strength * np.minimum(cover, 1.0)


def _dashes(s: np.ndarray, period: float, on: float, footprint: np.ndarray) -> np.ndarray:
    """Box-filtered square wave: 1 on [k P, k P + on), else 0, averaged over the footprint."""

    def integral(x: np.ndarray) -> np.ndarray:
        return np.floor(x / period) * on + np.minimum(np.mod(x, period), on)

    half = 0.5 * footprint
    return (integral(s + half) - integral(s - half)) / footprint


class Renderer:
    """Renders uint8 RGB [H, W, 3] frames of a road for a camera; precomputes the ray grid once."""

    def __init__(self, camera: Optional[Camera] = None) -> None:
        self.camera = cam = camera or Camera.default()
        c, s = np.cos(cam.pitch_rad), np.sin(cam.pitch_rad)
        v = np.arange(cam.height, dtype=np.float64)
        horizon = cam.horizon_row
        # rows whose whole footprint [v - 1/2, v + 1/2] is above ground get pure sky
        self._first_ground = int(np.clip(np.floor(horizon + 0.5), 0, cam.height))
        rows = np.arange(self._first_ground, cam.height)
        cover = np.clip(rows + 0.5 - horizon, 0.0, 1.0)  # ground fraction of each row
        vr = np.maximum(rows, horizon + 0.25)  # centre of the ground part for the straddling row
        ycr = (vr - cam.cy) / cam.fy
        dr = s + ycr * c
        t = cam.height_m / dr
        self._X = (t * (c - ycr * s)).astype(np.float32)[:, None]  # forward distance per row, m
        xs = (np.arange(cam.width) - cam.cx) / cam.fx
        self._Y = (-t[:, None] * xs[None, :]).astype(np.float32)  # left per pixel, m
        self._foot_lat = (t / cam.fx).astype(np.float32)[:, None]
        self._inv_foot_lat = 1.0 / self._foot_lat

        def fwd(vv: np.ndarray) -> np.ndarray:
            y = (vv - cam.cy) / cam.fy
            return cam.height_m * (c - y * s) / np.maximum(s + y * c, 1e-6)

        foot = np.abs(fwd(np.maximum(vr - 0.5, horizon + 1e-3)) - fwd(vr + 0.5))
        self._foot_s = np.clip(foot, 1e-3, 200.0).astype(np.float32)[:, None]
        self._detail = 1.0 / (1.0 + 4.0 * self._foot_s)
        self._shadow_cache: Dict[Tuple[int, Appearance], Tuple[Road, np.ndarray]] = {}
        self._tree_cache: Optional[Tuple[Road, np.ndarray]] = None
        self._nearest_cache: Optional[Tuple[Road, NearestPoints]] = None
        self._ground_cover = cover.astype(np.float32)[:, None, None]
        self._sky_rows = np.arange(0, self._first_ground + (1 if cover[0] < 1 else 0))
        elev = -np.arctan((v - cam.cy) / cam.fy) - cam.pitch_rad  # elevation of each row, rad
        self._row_elev = elev.astype(np.float32)
        self._col_az = np.arctan(-xs).astype(np.float32)  # azimuth of each column (left +), rad
        rng = np.random.default_rng(12345)
        self._tex_fine = _value_noise(rng, _TEX, (64, 128)).ravel()
        self._tex_coarse = _value_noise(rng, _TEX, (4, 8, 16, 32)).ravel()
        self._treeline = _value_noise(rng, _TEX, (6, 12, 24))[0]  # 1D periodic profile

    # ---------------------------------------------------------------- ground
    def _frenet(self, road: Road, x: float, y: float, yaw: float, s_car: float) -> Tuple[np.ndarray, ...]:
        """Per ground pixel: arc length s, offset d (left +), lane width, the arc length phasing the dashes,
        and the pixel's footprint across the road (inverse) and along it, in metres."""
        if road.kind == "hard":
            return self._frenet_nearest(road, x, y, yaw)
        i0 = road.index_at(s_car - 5.0)
        i1 = road.index_at(s_car + _FAR_M) + 1
        step = max(1, int(round(1.0 / road.ds_m)))
        sl = slice(i0, i1 + 1, step)
        dx, dy = road.x_m[sl] - x, road.y_m[sl] - y
        c, s = np.cos(yaw), np.sin(yaw)
        X = dx * c + dy * s
        Y = -dx * s + dy * c
        back = np.nonzero(np.diff(X) <= 0.0)[0]  # keep the stretch where the road moves away
        n = back[0] + 1 if len(back) else len(X)
        X, Y = X[:n], Y[:n]
        rx = self._X[:, 0]
        Xc = np.minimum(rx, X[-1])
        Yc = np.interp(rx, X, Y)
        phi = np.interp(rx, X, road.heading_rad[sl][:n] - yaw)
        sc = np.interp(rx, X, road.s_m[sl][:n])
        kappa = np.interp(rx, X, road.curvature_per_m[sl][:n])
        width = np.interp(rx, X, road.lane_width_m[sl][:n])
        col = lambda a: a.astype(np.float32)[:, None]  # noqa: E731
        cp, sp = col(np.cos(phi)), col(np.sin(phi))
        vx = col(rx - Xc)
        vy = self._Y - col(Yc)
        a = vx * cp + vy * sp
        d = -vx * sp + vy * cp - 0.5 * col(kappa) * a * a
        return col(sc) + a, d, col(width), col(sc), self._inv_foot_lat, self._foot_s

    def _frenet_nearest(self, road: Road, x: float, y: float, yaw: float) -> Tuple[np.ndarray, ...]:
        """:meth:`_frenet` from each pixel's nearest point of the reference line (module docstring)."""
        if self._nearest_cache is None or self._nearest_cache[0] is not road:
            self._nearest_cache = (road, NearestPoints(road))
        c, s = np.cos(yaw), np.sin(yaw)
        X, Y = np.broadcast_to(self._X, self._Y.shape), self._Y
        gx = (x + X * c - Y * s).astype(np.float64)
        gy = (y + X * s + Y * c).astype(np.float64)
        seg, along, d = self._nearest_cache[1].locate(gx, gy)
        arc = road.s_m.take(seg) + along * road.ds_m
        width = road.lane_width_m.take(seg) * (1.0 - along) + road.lane_width_m.take(seg + 1) * along
        # the footprint of a pixel (lateral t/fx by longitudinal dX/dv metres) across and along the road
        phi = road.heading_rad.take(seg) - yaw
        cross, ahead = np.abs(np.cos(phi)), np.abs(np.sin(phi))
        foot_d = cross * self._foot_lat + ahead * self._foot_s
        foot_s = ahead * self._foot_lat + cross * self._foot_s
        f32 = lambda a: a.astype(np.float32)  # noqa: E731
        return f32(arc), f32(d), f32(width), f32(arc), f32(1.0 / foot_d), f32(foot_s)

    def _ground(
        self, road: Road, app: Appearance, x: float, y: float, yaw: float, s_car: float
    ) -> np.ndarray:
        s, d, w, srow, inv_fl, fs = self._frenet(road, x, y, yaw, s_car)
        ad = np.abs(d)
        fine = self._tex_fine.take(_cell(s * 12.0) * _TEX + _cell(d * 12.0))
        coarse = self._tex_coarse.take(_cell(s * 2.0) * _TEX + _cell(d * 2.0))
        fine *= self._detail  # mip-map-like fade of the fine grain with footprint
        edge = w + 0.3  # asphalt extends 30 cm beyond the edge line, then 60 cm of gravel
        if app.road_snow > 0:
            edge = edge - app.road_snow * (0.6 + 0.4 * coarse)
        w_asph = _box(ad, edge, inv_fl)
        w_shoulder = _box(ad, w + 0.9, inv_fl) - w_asph
        w_ground = 1.0 - w_asph - w_shoulder
        weights = [
            w_ground * (1.0 + app.ground_texture * (coarse + 0.5 * fine)),
            w_shoulder * (1.0 + 0.15 * fine),
            w_asph * (1.0 + app.asphalt_texture * (fine + 0.5 * coarse)),
        ]
        colors = [app.ground_rgb, app.shoulder_rgb, app.asphalt_rgb]
        if app.marking_wear < 1.0:
            # dashes 4 m on / 8 m off; the row's arc length at the centre line sets the phase
            centre = (_box(d, 0.06, inv_fl) - _box(d, -0.06, inv_fl)) * _dashes(srow, 12.0, 4.0, fs)
            edges = _box(ad, w - 0.02, inv_fl) - _box(ad, w - 0.17, inv_fl)
            paint = (centre + edges) * np.clip((coarse + 1.0 - 2.0 * app.marking_wear) * 2.5, 0.0, 1.0)
            paint *= 1.0 - 0.5 * app.marking_wear
            weights = [wt * (1.0 - paint) for wt in weights] + [paint]
            colors.append(app.marking_rgb)
        rgb = np.stack(weights, axis=-1) @ np.asarray(colors, np.float32)
        if app.shadow_strength > 0:
            rgb *= self._shadow_light(road, app, s, d)[..., None]
        haze = (1.0 - np.exp(-self._X / app.visibility_m))[..., None]
        return rgb * (1.0 - haze) + haze * np.asarray(app.haze_rgb, np.float32)

    def _shadow_light(self, road: Road, app: Appearance, s: np.ndarray, d: np.ndarray) -> np.ndarray:
        """Light factor in [1 - strength, 1] per pixel, looked up in the road's shadow map."""
        key = (id(road), app)
        cached = self._shadow_cache.get(key)
        if cached is None or cached[0] is not road:
            if len(self._shadow_cache) >= 4:  # a few (road, appearance) pairs in flight at most
                self._shadow_cache.pop(next(iter(self._shadow_cache)))
            cached = self._shadow_cache[key] = (road, _shadow_map(road, app))
        light = cached[1]
        i = clamped_cell(s * (1.0 / _SHADOW_RES), light.shape[0])
        j = clamped_cell((d + _SHADOW_HALF_M) * (1.0 / _SHADOW_RES), light.shape[1])
        return light.ravel().take(i * light.shape[1] + j)

    # ---------------------------------------------------------------- sky + trees
    def _sky(self, app: Appearance, yaw: float) -> np.ndarray:
        rows = self._sky_rows
        el = self._row_elev[rows][:, None]
        t = np.clip(el / 0.35, 0.0, 1.0)[..., None]
        top, hor = np.asarray(app.sky_top_rgb, np.float32), np.asarray(app.sky_horizon_rgb, np.float32)
        sky = np.broadcast_to(hor * (1 - t) + top * t, (len(rows), self.camera.width, 3)).copy()
        az = (yaw + self._col_az) / (2 * np.pi) * _TEX
        prof = self._treeline[_cell(az)]
        height = 0.028 + 0.016 * prof  # elevation of the distant treeline, rad
        cover = np.clip((height[None, :] - el) * self.camera.fy + 0.5, 0.0, 1.0)[..., None]
        tree = np.asarray(app.treeline_rgb, np.float32) * 0.75 + 0.25 * hor
        return sky * (1 - cover) + tree * cover

    def _trees(
        self,
        img: np.ndarray,
        road: Road,
        app: Appearance,
        x: float,
        y: float,
        yaw: float,
        s_car: float,
        gain: np.ndarray,
    ) -> None:
        """Billboard trees (trunk + crown or cone), hazed by distance, drawn far to near with LINE_AA."""
        cam = self.camera
        if self._tree_cache is None or self._tree_cache[0] is not road:
            table = np.array(
                [[o.s_m, o.x_m, o.y_m, o.height_m, o.radius_m, o.kind] for o in road.objects], np.float64
            ).reshape(-1, 6)
            self._tree_cache = (road, table)
        table = self._tree_cache[1]
        lo, hi = np.searchsorted(table[:, 0], [s_car - 30.0, s_car + 150.0])
        tr = table[lo:hi]
        c, s = np.cos(yaw), np.sin(yaw)
        X = (tr[:, 1] - x) * c + (tr[:, 2] - y) * s
        Y = -(tr[:, 1] - x) * s + (tr[:, 2] - y) * c
        zc = X * np.cos(cam.pitch_rad) + cam.height_m * np.sin(cam.pitch_rad)
        ppm = cam.fx / np.maximum(zc, 1e-3)  # pixels per metre at the tree's depth
        u0 = cam.cx - Y * ppm
        v0 = cam.cy + cam.fy * (
            cam.height_m * np.cos(cam.pitch_rad) - X * np.sin(cam.pitch_rad)
        ) / np.maximum(zc, 1e-3)
        reach = 2.0 * tr[:, 4] * ppm
        keep = (X > 1.0) & (u0 > -reach) & (u0 < cam.width + reach)
        order = np.nonzero(keep)[0][np.argsort(-X[keep], kind="stable")]
        if len(order) == 0:
            return
        haze = (1.0 - np.exp(-X[order] / app.visibility_m))[:, None]
        conifer = (0.10, 0.22, 0.12) if app.season != "winter" else (0.38, 0.45, 0.42)
        crown = np.where(tr[order, 5:6] > 0.5, np.asarray(conifer), np.asarray(app.canopy_rgb))

        def shade(rgb: np.ndarray) -> list:
            return np.clip(
                (rgb * (1.0 - haze) + np.asarray(app.haze_rgb) * haze) * gain * 255.0, 0, 255
            ).tolist()

        trunk_col, crown_col = shade(np.asarray(app.trunk_rgb)[None, :]), shade(crown)
        f = 1 << _SUBPIXEL_BITS
        rows = np.stack(
            [u0[order], v0[order], ppm[order], tr[order, 3], tr[order, 4], tr[order, 5]], 1
        ).tolist()
        for (u, v, p, height, radius, kind), tc, cc in zip(rows, trunk_col, crown_col):
            top, r, half = v - height * p, radius * p, max(0.15 * p, 0.5)
            trunk = [[u - half, v], [u + half, v], [u + half / 2, top + r], [u - half / 2, top + r]]
            cv2.fillConvexPoly(img, (np.asarray(trunk) * f).astype(np.int32), tc, cv2.LINE_AA, _SUBPIXEL_BITS)
            if kind > 0.5:  # conifer: a cone from near the ground to the top
                base = v - 0.12 * height * p
                cone = [[u - 0.8 * r, base], [u + 0.8 * r, base], [u, top]]
                cv2.fillConvexPoly(
                    img, (np.asarray(cone) * f).astype(np.int32), cc, cv2.LINE_AA, _SUBPIXEL_BITS
                )
            else:  # broadleaf: a crown over the upper 60 % of the tree
                ry = 0.3 * height * p
                cv2.ellipse(
                    img,
                    (int(u * f), int((top + ry) * f)),
                    (max(int(r * f), 1), max(int(ry * f), 1)),
                    0.0,
                    0.0,
                    360.0,
                    cc,
                    -1,
                    cv2.LINE_AA,
                    _SUBPIXEL_BITS,
                )

    # ---------------------------------------------------------------- public
    def render(
        self, road: Road, appearance: Appearance, x_m: float, y_m: float, yaw_rad: float, s_hint_m: float
    ) -> np.ndarray:
        """Frame seen from world pose (x_m, y_m, yaw_rad); ``s_hint_m`` = the car's arc length.

        Returns uint8 RGB [height, width, 3].
        """
        cam = self.camera
        img = np.empty((cam.height, cam.width, 3), np.float32)
        sky = self._sky(appearance, yaw_rad)
        g0 = self._first_ground
        img[: len(sky)] = sky
        ground = self._ground(road, appearance, x_m, y_m, yaw_rad, s_hint_m)
        cover = self._ground_cover
        img[g0:] = ground
        if len(sky) > g0:  # the row the horizon crosses: blend sky and ground by coverage
            img[g0] = ground[0] * cover[0] + sky[g0] * (1.0 - cover[0])
        gain = appearance.brightness * np.asarray(appearance.tint, np.float32)
        img *= gain * 255.0
        img += 0.5
        np.clip(img, 0.0, 255.0, out=img)
        out = img.astype(np.uint8)
        self._trees(out, road, appearance, x_m, y_m, yaw_rad, s_hint_m, gain)
        return out

    def render_at(
        self, road: Road, appearance: Appearance, s_m: float, lateral_m: float = 0.0, yaw_rad: float = 0.0
    ) -> np.ndarray:
        """Frame from ``lateral_m`` left of the right-lane centre at ``s_m``, yawed ``yaw_rad`` left."""
        x, y, yaw = road.lane_pose(s_m, lateral_m, yaw_rad)
        return self.render(road, appearance, x, y, yaw, s_m)


_RENDERERS: Dict[Camera, Renderer] = {}


def render_view(
    road: Road,
    appearance: Appearance,
    s_m: float,
    lateral_m: float = 0.0,
    yaw_rad: float = 0.0,
    camera: Optional[Camera] = None,
) -> np.ndarray:
    """Render the world at an arbitrary pose relative to the right-lane centre (see module doc).

    Returns uint8 RGB [camera.height, camera.width, 3]; renderers are cached per camera.
    """
    cam = camera or Camera.default()
    if cam not in _RENDERERS:
        _RENDERERS[cam] = Renderer(cam)
    return _RENDERERS[cam].render_at(road, appearance, s_m, lateral_m, yaw_rad)
