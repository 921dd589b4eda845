"""Forward camera of the built-in world: a pinhole over a flat ground plane, vectorized numpy.

Geometry. Vehicle frame: x forward, y left, z up; the camera sits ``height_m`` above the
ground at the vehicle's reference point, pitched down by ``pitch_rad``. Camera frame
(OpenCV): x right, y down, z along the optical axis; pixel centres at integer coordinates.
A ground point (X forward, Y left) projects to

    z_c = X cos(pitch) + h sin(pitch),   y_c = h cos(pitch) - X sin(pitch),
    u = cx - fx Y / z_c,                 v = cy + fy y_c / z_c,

and the horizon is the row ``v = cy - fy tan(pitch)``. Every image row below the horizon
therefore sees one forward distance X(v) and every pixel a fixed (X, Y) ground point; the
renderer precomputes them once per camera. Per frame it samples the road centreline ahead
in the vehicle frame, interpolates its lateral position, direction, arc length and
curvature at each row's X, and converts every pixel to Frenet coordinates (s, d) to second
order (``d = b - kappa a^2 / 2``). Shading is lookup and arithmetic on those arrays:
asphalt, paint (dashes from arc length), gravel shoulders, verges (grass, leaves, snow),
tree shadows as boxes in (s, d), haze ``1 - exp(-X / visibility)``, and a sky gradient
with a distant treeline above the horizon. Trees are billboards drawn far to near.

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

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import cv2
import numpy as np

from drive.sim.appearance import Appearance
from drive.sim.road import Road

__all__ = ["Camera", "Renderer", "render_view"]

_FAR_M = 250.0  # road sampled this far ahead; beyond, haze covers the ground
_TEX = 256


@dataclass(frozen=True)
class Camera:
    """Pinhole camera mounted on the vehicle. Pixels: OpenCV convention (centres at integers)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    height_m: float
    pitch_rad: float  # downwards

    @classmethod
    def default(cls, width: int = 200, height: int = 78, hfov_deg: float = 80.0,
                height_m: float = 1.5, pitch_rad: float = 0.15) -> "Camera":
        """Square pixels, horizontal field of view ``hfov_deg``, principal point at the centre."""
        if width < 16 or height < 8:
            raise ValueError(f"camera must be at least 16x8 pixels, got {width}x{height}")
        f = 0.5 * width / np.tan(np.radians(hfov_deg) / 2.0)
        return cls(width=int(width), height=int(height), fx=float(f), fy=float(f),
                   cx=(width - 1) / 2.0, cy=(height - 1) / 2.0, height_m=float(height_m),
                   pitch_rad=float(pitch_rad))

    @property
    def horizon_row(self) -> float:
        """Image row (float) of the horizon of the flat ground."""
        return self.cy - self.fy * np.tan(self.pitch_rad)

    def project_ground(self, forward_m: np.ndarray, left_m: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates (u, v) of ground points given in the vehicle frame (m)."""
        c, s = np.cos(self.pitch_rad), np.sin(self.pitch_rad)
        zc = np.asarray(forward_m) * c + self.height_m * s
        yc = self.height_m * c - np.asarray(forward_m) * s
        return self.cx - self.fx * np.asarray(left_m) / zc, self.cy + self.fy * yc / zc


def _value_noise(rng: np.random.Generator, size: int, octaves: Tuple[int, ...]) -> np.ndarray:
    """Tileable fractal noise in [-1, 1], float32 [size, size]."""
    out = np.zeros((size, size), np.float32)
    for cells in octaves:
        grid = rng.uniform(-1.0, 1.0, (cells, cells)).astype(np.float32)
        tiled = np.tile(grid, (3, 3))
        up = cv2.resize(tiled, (3 * size, 3 * size), interpolation=cv2.INTER_CUBIC)
        out += up[size:2 * size, size:2 * size] / np.sqrt(cells)
    return out / np.abs(out).max()


def _box(x: np.ndarray, edge: np.ndarray, footprint: np.ndarray) -> np.ndarray:
    """Fraction of a pixel footprint centred at ``x`` lying below ``edge`` (exact box filter)."""
    return np.clip((edge - x) / footprint + 0.5, 0.0, 1.0)


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
        yc = (v - cam.cy) / cam.fy
        down = s + yc * c
        horizon = cam.horizon_row
        # rows whose whole footprint [v - 1/2, v + 1/2] is above ground get pure sky
        self._first_ground = int(np.clip(np.floor(horizon + 0.5) , 0, cam.height))
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
        def fwd(vv: np.ndarray) -> np.ndarray:
            y = (vv - cam.cy) / cam.fy
            return cam.height_m * (c - y * s) / np.maximum(s + y * c, 1e-6)
        foot = np.abs(fwd(np.maximum(vr - 0.5, horizon + 1e-3)) - fwd(vr + 0.5))
        self._foot_s = np.clip(foot, 1e-3, 200.0).astype(np.float32)[:, None]
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
        return col(sc) + a, d, col(width), col(sc)

    def _ground(self, road: Road, app: Appearance, x: float, y: float, yaw: float, s_car: float) -> np.ndarray:
        s, d, w, srow = self._frenet(road, x, y, yaw, s_car)
        fl, fs = self._foot_lat, self._foot_s
        ad = np.abs(d)
        fine = self._tex_fine.take((np.mod(s * 12.0, _TEX).astype(np.int32) * _TEX
                                    + np.mod(d * 12.0, _TEX).astype(np.int32)))
        coarse = self._tex_coarse.take((np.mod(s * 2.0, _TEX).astype(np.int32) * _TEX
                                        + np.mod(d * 2.0, _TEX).astype(np.int32)))
        detail = 1.0 / (1.0 + fs * 4.0)  # mip-map-like fade of fine texture with footprint
        asphalt_edge = w + 0.3
        if app.road_snow > 0:
            asphalt_edge = asphalt_edge - app.road_snow * (0.6 + 0.4 * coarse)
        w_asph = _box(ad, asphalt_edge, fl)
        w_shoulder = _box(ad, w + 0.9, fl) - w_asph
        w_ground = 1.0 - w_asph - w_shoulder
        grain = 1.0 + app.asphalt_texture * (fine * detail + 0.5 * coarse)
        weights = [w_ground * (1.0 + app.ground_texture * (coarse + 0.5 * fine * detail)),
                   w_shoulder * (1.0 + 0.15 * fine * detail), w_asph * grain]
        colors = [app.ground_rgb, app.shoulder_rgb, app.asphalt_rgb]
        if app.marking_wear < 1.0:
            centre = (_box(d, 0.06, fl) - _box(d, -0.06, fl)) * _dashes(s, 12.0, 4.0, fs)
            edges = _box(ad, w - 0.02, fl) - _box(ad, w - 0.17, fl)
            paint = (centre + edges) * np.clip((coarse + 1.0 - 2.0 * app.marking_wear) * 2.5, 0.0, 1.0)
            paint *= np.clip(1.0 - app.marking_wear * 0.5, 0.0, 1.0)
            weights = [wt * (1.0 - paint) for wt in weights] + [paint]
            colors.append(app.marking_rgb)
        rgb = np.stack(weights, axis=-1) @ np.asarray(colors, np.float32)
        if app.shadow_strength > 0:
            rgb *= self._shadows(road, app, s, d, fl, fs, srow, s_car)[..., None]
        haze = (1.0 - np.exp(-self._X / app.visibility_m))[..., None]
        return rgb * (1.0 - haze) + haze * np.asarray(app.haze_rgb, np.float32)

    def _shadows(self, road: Road, app: Appearance, s: np.ndarray, d: np.ndarray, fl: np.ndarray,
                 fs: np.ndarray, srow: np.ndarray, s_car: float) -> np.ndarray:
        """Light factor in [1 - strength, 1] from tree shadows, boxes in (s, d)."""
        light = np.zeros(s.shape, np.float32)
        cot = 1.0 / np.tan(app.sun_elevation_rad)
        ca, sa = np.cos(app.sun_azimuth_rad), np.sin(app.sun_azimuth_rad)
        stretch = min(1.0 / np.sin(app.sun_elevation_rad), 3.0)
        row_s = srow[::-1, 0]  # increasing
        lo_s, hi_s = s_car - 10.0, s_car + 120.0
        for obj in road.objects:
            if obj.s_m < lo_s - 40.0 or obj.s_m > hi_s + 40.0:
                continue
            reach = 0.7 * obj.height_m * cot
            cs, cd = obj.s_m - reach * ca, obj.d_m - reach * sa
            rs = obj.radius_m * (1.0 + abs(ca) * (stretch - 1.0))
            rd = obj.radius_m * (1.0 + abs(sa) * (stretch - 1.0))
            if cs + rs < lo_s or cs - rs > hi_s or abs(cd) - rd > 6.0:
                continue
            n = len(row_s)
            r1 = n - int(np.searchsorted(row_s, cs - rs - 20.0))
            r0 = n - int(np.searchsorted(row_s, cs + rs + 20.0, side="right"))
            if r1 <= r0:
                continue
            ss, dd = s[r0:r1], d[r0:r1]
            pen_s, pen_d = fs[r0:r1] + 0.4, fl[r0:r1] + 0.4  # footprint + penumbra
            box = ((_box(ss, cs + rs, pen_s) - _box(ss, cs - rs, pen_s))
                   * (_box(dd, cd + rd, pen_d) - _box(dd, cd - rd, pen_d)))
            light[r0:r1] += box
        return 1.0 - app.shadow_strength * np.minimum(light, 1.0)

    # ---------------------------------------------------------------- sky + trees
    def _sky(self, app: Appearance, yaw: float) -> np.ndarray:
        rows = self._sky_rows
        el = self._row_elev[rows][:, None]
        t = np.clip(el / 0.35, 0.0, 1.0)[..., None]
        top, hor = np.asarray(app.sky_top_rgb, np.float32), np.asarray(app.sky_horizon_rgb, np.float32)
        sky = np.broadcast_to(hor * (1 - t) + top * t, (len(rows), self.camera.width, 3)).copy()
        az = (yaw + self._col_az) / (2 * np.pi) * _TEX
        prof = self._treeline[np.mod(az.astype(np.int64), _TEX)]
        height = 0.028 + 0.016 * prof  # elevation of the distant treeline, rad
        cover = np.clip((height[None, :] - el) * self.camera.fy + 0.5, 0.0, 1.0)[..., None]
        tree = np.asarray(app.treeline_rgb, np.float32) * 0.75 + 0.25 * hor
        return sky * (1 - cover) + tree * cover

    def _trees(self, img: np.ndarray, road: Road, app: Appearance, x: float, y: float, yaw: float,
               s_car: float, gain: np.ndarray) -> None:
        cam = self.camera
        c, s = np.cos(yaw), np.sin(yaw)
        near = [o for o in road.objects if s_car - 30.0 < o.s_m < s_car + 150.0]
        placed = []
        for o in near:
            X = (o.x_m - x) * c + (o.y_m - y) * s
            Y = -(o.x_m - x) * s + (o.y_m - y) * c
            if X > 1.0:
                placed.append((X, Y, o))
        placed.sort(key=lambda p: -p[0])
        haze_rgb = np.asarray(app.haze_rgb)
        sh = 8  # fixed-point bits for sub-pixel antialiased drawing
        for X, Y, o in placed:
            u0, v0 = cam.project_ground(X, Y)
            zc = X * np.cos(cam.pitch_rad) + cam.height_m * np.sin(cam.pitch_rad)
            ppm = cam.fx / zc  # pixels per metre at that depth
            if u0 < -o.radius_m * ppm * 2 or u0 > cam.width + o.radius_m * ppm * 2:
                continue
            haze = 1.0 - np.exp(-X / app.visibility_m)
            def color(rgb: Tuple[float, float, float]) -> Tuple[float, ...]:
                mixed = (np.asarray(rgb) * (1 - haze) + haze_rgb * haze) * gain
                return tuple(float(v) for v in np.clip(mixed * 255.0, 0, 255))
            top = v0 - o.height_m * ppm
            r = o.radius_m * ppm
            trunk_w = max(0.3 * ppm, 1.0)
            pts = lambda arr: (np.asarray(arr) * (1 << sh)).astype(np.int32)  # noqa: E731
            cv2.fillConvexPoly(img, pts([[u0 - trunk_w / 2, v0], [u0 + trunk_w / 2, v0],
                                         [u0 + trunk_w / 4, top + r], [u0 - trunk_w / 4, top + r]]),
                               color(app.trunk_rgb), cv2.LINE_AA, sh)
            if o.kind == 1:  # conifer: dark green cone, snow-dusted in winter
                canopy = (0.10, 0.22, 0.12) if app.season != "winter" else (0.38, 0.45, 0.42)
                base = v0 - 0.12 * o.height_m * ppm
                cv2.fillConvexPoly(img, pts([[u0 - 0.8 * r, base], [u0 + 0.8 * r, base], [u0, top]]),
                                   color(canopy), cv2.LINE_AA, sh)
            else:  # broadleaf: a crown over the upper 60 % of the tree
                ry = 0.3 * o.height_m * ppm
                centre = (int(u0 * (1 << sh)), int((top + ry) * (1 << sh)))
                axes = (max(int(r * (1 << sh)), 1), max(int(ry * (1 << sh)), 1))
                cv2.ellipse(img, centre, axes, 0.0, 0.0, 360.0, color(app.canopy_rgb), -1, cv2.LINE_AA, sh)

    # ---------------------------------------------------------------- public
    def render(self, road: Road, appearance: Appearance, x_m: float, y_m: float, yaw_rad: float,
               s_hint_m: float) -> np.ndarray:
        """Frame seen from world pose (x_m, y_m, yaw_rad); ``s_hint_m`` = the car's arc length.

        Returns uint8 RGB [height, width, 3].
        """
        cam = self.camera
        img = np.empty((cam.height, cam.width, 3), np.float32)
        sky = self._sky(appearance, yaw_rad)
        g0 = self._first_ground
        img[:len(sky)] = sky
        ground = self._ground(road, appearance, x_m, y_m, yaw_rad, s_hint_m)
        cover = self._ground_cover
        img[g0:] = ground
        if len(sky) > g0:  # the row the horizon crosses: blend sky and ground by coverage
            img[g0] = ground[0] * cover[0] + sky[g0] * (1.0 - cover[0])
        gain = appearance.brightness * np.asarray(appearance.tint, np.float32)
        out = np.clip(img * (gain * 255.0) + 0.5, 0.0, 255.0).astype(np.uint8)
        self._trees(out, road, appearance, x_m, y_m, yaw_rad, s_hint_m, gain)
        return out

    def render_at(self, road: Road, appearance: Appearance, s_m: float, lateral_m: float = 0.0,
                  yaw_rad: float = 0.0) -> np.ndarray:
        """Frame from ``lateral_m`` left of the right-lane centre at ``s_m``, yawed ``yaw_rad`` left."""
        x, y, yaw = road.lane_pose(s_m, lateral_m, yaw_rad)
        return self.render(road, appearance, x, y, yaw, s_m)


_RENDERERS: Dict[Camera, Renderer] = {}


def render_view(road: Road, appearance: Appearance, s_m: float, lateral_m: float = 0.0,
                yaw_rad: float = 0.0, camera: Optional[Camera] = None) -> np.ndarray:
    """Render the world at an arbitrary pose relative to the right-lane centre (see module doc).

    Returns uint8 RGB [camera.height, camera.width, 3]; renderers are cached per camera.
    """
    cam = camera or Camera.default()
    if cam not in _RENDERERS:
        _RENDERERS[cam] = Renderer(cam)
    return _RENDERERS[cam].render_at(road, appearance, s_m, lateral_m, yaw_rad)
