"""Machine shapes and GPU names: what a machine type is made of, in billed units.

Compute Engine bills a VM as vCPUs × a core price + GiB × a RAM price + GPUs × a GPU
price (https://cloud.google.com/compute/vm-instance-pricing,
https://cloud.google.com/compute/gpus-pricing); the price table (``skus.py``) holds those
unit prices, and this module says how many of each unit a machine type has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["FAMILIES", "Family", "Shape", "gpu_key", "problem", "region_of", "shape"]


@dataclass(frozen=True)
class Shape:
    """A machine type's billed units.

    Attributes:
        family: The series whose core and RAM SKUs price it (``n1``, ``g2``, ``a2``, ``a3``).
        vcpus: vCPUs.
        gib: Memory in GiB (the RAM SKUs' unit is ``GiBy.h``).
        gpu: The GPUs the machine type comes with (``gpu_key`` names); ``""`` for none.
        gpus: How many.
    """

    family: str
    vcpus: float
    gib: float
    gpu: str = ""
    gpus: int = 0


@dataclass(frozen=True)
class Family:
    """What one Compute Engine machine family offers: its predefined types, its GPUs.

    Attributes:
        types: Each type's (vCPUs, GiB, GPU built in, how many).
        attach: GPUs that can be attached (N1 only): count -> at most this many vCPUs.
    """

    types: dict[str, tuple[float, float, str, int]]
    attach: dict[str, dict[int, int]] = field(default_factory=dict)


def _n1_types() -> dict[str, tuple[float, float, str, int]]:
    # n1-standard-N has 3.75 GB per vCPU, n1-highmem-N 6.5, n1-highcpu-N 0.9; standard
    # from 1 vCPU, highmem and highcpu from 2, up to 96
    # (https://cloud.google.com/compute/docs/machine-types: "N1 machine types offer up to
    # 96 vCPUs", the table n1-standard-1 ... n1-standard-96;
    # https://cloud.google.com/compute/docs/general-purpose-machines#n1_machines).
    # Compute Engine's "GB" of machine memory is GiB: the API's machineTypes.memoryMb of
    # n1-standard-4 is 15360 (MiB), which SkyPilot's catalog fetcher divides by 1024
    # (skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py, _get_machine_type_for_zone).
    sizes = (1, 2, 4, 8, 16, 32, 64, 96)
    per_vcpu = {"standard": (3.75, sizes), "highmem": (6.5, sizes[1:]), "highcpu": (0.9, sizes[1:])}
    return {
        f"n1-{kind}-{n}": (n, n * gib, "", 0) for kind, (gib, ns) in per_vcpu.items() for n in ns
    }


# Every machine family spottrain prices, in one table. GPU families have their GPUs built
# in, a fixed count per type (https://cloud.google.com/compute/docs/gpus: "To run NVIDIA
# L4 GPUs, you must use a G2 accelerator-optimized machine type", H100 likewise A3, A100
# A2; "Each A3/A2/G2 machine type has a fixed GPU count"; the counts from
# https://cloud.google.com/compute/docs/gpus#l4-gpus (G2),
# https://cloud.google.com/compute/docs/accelerator-optimized-machines#a2-vms (A2 Standard
# "highgpu"/"megagpu" with A100 40GB, A2 Ultra "ultragpu" with A100 80GB) and
# https://cloud.google.com/compute/docs/accelerator-optimized-machines#a3-high-vms (A3 High).
# N1 takes only T4, V100, P100 and P4 (the same page: "N1 machine series: NVIDIA T4, V100,
# P100, P4"), 1, 2, 4 (V100 also 8) of them, and at most this many vCPUs per GPU count
# (the page's N1 tables; SkyPilot keeps the same limits, citing it:
# sky/catalog/gcp_catalog.py _NUM_ACC_TO_MAX_CPU_AND_MEMORY). Their memory limits never
# bind on a predefined type: the most memory within each vCPU limit (n1-highmem) fits.
FAMILIES: dict[str, Family] = {
    "n1": Family(
        _n1_types(),
        attach={
            "t4": {1: 48, 2: 48, 4: 96},
            "v100": {1: 12, 2: 24, 4: 48, 8: 96},
            "p100": {1: 16, 2: 32, 4: 96},
            "p4": {1: 24, 2: 48, 4: 96},
        },
    ),
    "g2": Family(
        {
            "g2-standard-4": (4, 16, "l4", 1),
            "g2-standard-8": (8, 32, "l4", 1),
            "g2-standard-12": (12, 48, "l4", 1),
            "g2-standard-16": (16, 64, "l4", 1),
            "g2-standard-24": (24, 96, "l4", 2),
            "g2-standard-32": (32, 128, "l4", 1),
            "g2-standard-48": (48, 192, "l4", 4),
            "g2-standard-96": (96, 384, "l4", 8),
        }
    ),
    "a2": Family(
        {
            "a2-highgpu-1g": (12, 85, "a100-40gb", 1),
            "a2-highgpu-2g": (24, 170, "a100-40gb", 2),
            "a2-highgpu-4g": (48, 340, "a100-40gb", 4),
            "a2-highgpu-8g": (96, 680, "a100-40gb", 8),
            "a2-megagpu-16g": (96, 1360, "a100-40gb", 16),
            "a2-ultragpu-1g": (12, 170, "a100-80gb", 1),
            "a2-ultragpu-2g": (24, 340, "a100-80gb", 2),
            "a2-ultragpu-4g": (48, 680, "a100-80gb", 4),
            "a2-ultragpu-8g": (96, 1360, "a100-80gb", 8),
        }
    ),
    "a3": Family(
        {
            "a3-highgpu-1g": (26, 234, "h100-80gb", 1),
            "a3-highgpu-2g": (52, 468, "h100-80gb", 2),
            "a3-highgpu-4g": (104, 936, "h100-80gb", 4),
            "a3-highgpu-8g": (208, 1872, "h100-80gb", 8),
        }
    ),
}

# GKE's node label cloud.google.com/gke-accelerator and Compute Engine's accelerator
# type names (https://cloud.google.com/compute/docs/gpus), and Vertex AI's
# AcceleratorType enum (google-cloud-aiplatform, aiplatform_v1/types/accelerator_type.py:
# NVIDIA_TESLA_T4, NVIDIA_L4 = 11, NVIDIA_TESLA_A100, NVIDIA_A100_80GB = 9,
# NVIDIA_H100_80GB = 13), to one key per card.
_GPU_NAMES = {
    "t4": ("nvidia-tesla-t4", "NVIDIA_TESLA_T4"),
    "l4": ("nvidia-l4", "NVIDIA_L4"),
    "a100-40gb": ("nvidia-tesla-a100", "NVIDIA_TESLA_A100"),
    "a100-80gb": ("nvidia-a100-80gb", "NVIDIA_A100_80GB"),
    "h100-80gb": ("nvidia-h100-80gb", "NVIDIA_H100_80GB"),
    "v100": ("nvidia-tesla-v100", "NVIDIA_TESLA_V100"),
    "p100": ("nvidia-tesla-p100", "NVIDIA_TESLA_P100"),
    "p4": ("nvidia-tesla-p4", "NVIDIA_TESLA_P4"),
}
_GPU_KEYS = {name.lower(): key for key, names in _GPU_NAMES.items() for name in names}
_GPU_KEYS.update({key: key for key in _GPU_NAMES})

_LOCATION = re.compile(r"^([a-z]+-[a-z]+\d+)(?:-[a-z])?$")


def shape(machine_type: str) -> Shape | None:
    """The billed units of ``machine_type``; ``None`` for a type not in :data:`FAMILIES`."""
    name = machine_type.strip().lower()
    family = FAMILIES.get(name.split("-", 1)[0])
    if family is None or name not in family.types:
        return None
    vcpus, gib, gpu, gpus = family.types[name]
    return Shape(name.split("-", 1)[0], vcpus, gib, gpu, gpus)


def problem(machine_type: str, gpu: str = "", count: int = 0) -> str:
    """Why Compute Engine has no ``machine_type`` with ``count`` ``gpu`` GPUs; ``""`` if it does.

    Args:
        machine_type: The machine type.
        gpu: The GPUs' name as given (``gpu_key`` knows it), ``""`` for none.
        count: How many; 0 when unknown (a built-in count is then the type's).

    A family not in :data:`FAMILIES` is not judged here (``""``): its price can only
    come from the user's own prices.
    """
    name = machine_type.strip().lower()
    prefix = name.split("-", 1)[0]
    family = FAMILIES.get(prefix)
    if family is None:
        return ""
    if name not in family.types:
        return f"machine type {name!r} does not exist: {_offered(prefix, name)}"
    vcpus, _, built_in, built_count = family.types[name]
    key = gpu_key(gpu) if gpu else ""
    if key is None:
        return ""  # a GPU no one here knows: the caller says so
    if built_in:
        label = _GPU_NAMES[built_in][0]
        if key and key != built_in:
            return f"{name} comes with {built_count} {label}, not {gpu}"
        if count and count != built_count:
            return f"{name} comes with {built_count} {label}, not {count}"
        return ""
    if not key:
        return f"{count} GPUs of no named type" if count else ""
    limits = family.attach.get(key)
    if limits is None:
        takes = _either([_GPU_NAMES[k][0] for k in family.attach])
        homes = sorted(f.upper() for f, fam in FAMILIES.items() if _builds_in(fam, key))
        where = f" ({_GPU_NAMES[key][0]} comes only built into {', '.join(homes)} types)"
        return f"{name} cannot have {gpu} GPUs: {prefix.upper()} takes {takes}" + (
            where if homes else ""
        )
    if count and count not in limits:
        takes = _either([str(n) for n in limits])
        return f"{name} cannot have {count} {gpu}: {prefix.upper()} takes {takes} of them"
    if count and vcpus > limits[count]:
        return (
            f"{name} cannot have {count} {gpu}: with {count}, {prefix.upper()} allows at most "
            f"{limits[count]} vCPUs"
        )
    return ""


def _either(items: list[str]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)


def _builds_in(family: Family, key: str) -> bool:
    return any(t[2] == key for t in family.types.values())


def _offered(prefix: str, name: str) -> str:
    """The types of ``name``'s kind, in one phrase."""
    family = FAMILIES[prefix]
    if family.attach:  # N1: named by kind and vCPUs
        kind = name.rsplit("-", 1)[0]
        sizes = [str(int(v[0])) for t, v in family.types.items() if t.rsplit("-", 1)[0] == kind]
        if sizes:
            return f"{kind} has {_either(sizes)} vCPUs"
    return f"the {prefix.upper()} types are {', '.join(family.types)}"


def gpu_key(name: str) -> str | None:
    """One key per card for a GKE label, a Compute Engine type or a Vertex enum name."""
    return _GPU_KEYS.get(name.strip().lower())


def region_of(location: str) -> str | None:
    """``us-central1`` for ``us-central1`` or ``us-central1-a``; ``None`` if neither."""
    m = _LOCATION.match(location.strip().lower())
    return m.group(1) if m else None
