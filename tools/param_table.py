"""Print the lane-keeping parameter table from the real drive modules beside the papers' numbers.

Usage: python tools/param_table.py [--json]

"stored" counts every parameter tensor element; "trainable" leaves out the entries of absent
synapses (they are masked, receive zero gradient and never change), which is what the papers count.
Paper numbers: NCP slides / Nature MI 2020 (CNN, CT-RNN, LSTM, NCP) and the CfC paper's Table 3
(a different, unspecified head and RNN configuration: its numbers are quoted, not expected to match).
"""

from __future__ import annotations

import argparse
import json
from typing import Dict, List, Optional

from torch import nn

from drive.nn import CTRNN, LSTM, LTC, CfC, WiredCfC, lane_keeping_ncp
from drive.nn.heads import NCPConvHead, PilotNetCNN

# parameter name -> the mask buffer that says which of its entries exist
MASKS = {
    "w": "mask",
    "sigma": "mask",
    "mu": "mask",
    "erev": "mask",
    "sensory_w": "sensory_mask",
    "sensory_sigma": "sensory_mask",
    "sensory_mu": "sensory_mask",
    "sensory_erev": "sensory_mask",
    "weight": "mask",
    "sensory_weight": "sensory_mask",
    "memory.input_map.weight": "memory_mask",
    "memory.recurrent_map.weight": "memory_recurrent_mask",
}


def stored(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def trainable(module: nn.Module) -> int:
    """Parameters minus the masked-out entries of absent synapses."""
    buffers = dict(module.named_buffers())
    total = 0
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        mask = buffers.get(MASKS.get(name, ""))
        total += int((mask != 0).sum()) if mask is not None and mask.shape == p.shape else p.numel()
    return total


def rows() -> List[Dict[str, Optional[object]]]:
    wiring = lane_keeping_ncp()
    ltc = LTC(wiring)
    out: List[Dict[str, Optional[object]]] = []

    def add(
        model: str,
        module: nn.Module,
        paper: Optional[int],
        cfc_table3: Optional[int],
        note: str,
        count: Optional[int] = None,
    ) -> None:
        out.append(
            {
                "model": model,
                "module": type(module).__name__,
                "stored": stored(module),
                "trainable": trainable(module) if count is None else count,
                "paper": paper,
                "cfc_table3": cfc_table3,
                "note": note,
            }
        )

    add("CNN (PilotNet-style)", PilotNetCNN(), 5_068_900, 2_124_901, "whole network; Table 3's CNN differs")
    add("conv head (CT-RNN/LSTM/NCP)", NCPConvHead(), 79_420, None, "71,388 conv + 8,032 dense")
    add("CT-RNN 64", CTRNN(32, 64, 1), 6_273, None, "6,208 without the 65-parameter readout")
    add(
        "LSTM 64",
        LSTM(32, 64, 1),
        24_897,
        33_089,
        "one bias per gate as Keras (torch's 2nd bias frozen at 0)",
    )
    add(
        "NCP (LTC, 19 neurons)",
        ltc,
        1_065,
        6_495,
        f"paper count 3/neuron + 4/synapse at {wiring.total_synapse_count} synapses (paper: 253)",
        count=wiring.paper_parameter_count,
    )
    add("NCP (LTC) incl. affine maps", ltc, None, None, "+ input_w, input_b (2x32), output_w, output_b")
    for label, mode, mixed, t3 in (
        ("Cf-S", "pure", False, 1_084),
        ("CfC", "default", False, 4_184),
        ("CfC-NoGate", "no_gate", False, 4_184),
        ("CfC-mmRNN", "default", True, 8_408),
    ):
        add(
            f"{label} (NCP-wired, 19)",
            WiredCfC(wiring, mode=mode, mixed_memory=mixed),
            None,
            t3,
            "drive's wired CfC on the lane-keeping NCP",
        )
    add("CfC dense 64 (ncps defaults)", CfC(32, 64, output_size=1), None, None, "backbone 1 x 128")
    return out


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    table = rows()
    if args.json:
        print(json.dumps(table, indent=2))
        return

    def fmt(v: Optional[object]) -> str:
        return "-" if v is None else f"{v:,}"

    print("| model | drive module | stored | trainable | paper (NCP) | CfC Table 3 (RNN) | note |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in table:
        print(
            f"| {r['model']} | {r['module']} | {fmt(r['stored'])} | {fmt(r['trainable'])} "
            f"| {fmt(r['paper'])} | {fmt(r['cfc_table3'])} | {r['note']} |"
        )


if __name__ == "__main__":
    main()
