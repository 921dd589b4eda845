"""The built-in driving world: procedural roads, a forward camera, an expert, recordings, closed loop.

See docs/world.md. Modules, upstream first: road (road_hard) -> appearance -> camera -> render -> vehicle
-> speed -> driver (Observation, Driver protocol) -> expert -> world -> record / closed_loop.
The camera has one import path, ``from drive.sim.camera import Camera``.
"""

from drive.sim.appearance import CONDITION_AXES, Appearance, parse_conditions, sample_appearance
from drive.sim.driver import ConstantDriver, Driver, Observation
from drive.sim.expert import PurePursuitExpert, SteeringNoise
from drive.sim.render import Renderer, render_view
from drive.sim.road import Road, generate_road, world_seed
from drive.sim.vehicle import Vehicle, VehicleLimits, VehicleState
from drive.sim.world import World

__all__ = [
    "CONDITION_AXES",
    "Appearance",
    "parse_conditions",
    "sample_appearance",
    "ConstantDriver",
    "Driver",
    "Observation",
    "PurePursuitExpert",
    "SteeringNoise",
    "Renderer",
    "render_view",
    "Road",
    "generate_road",
    "world_seed",
    "Vehicle",
    "VehicleLimits",
    "VehicleState",
    "World",
]
