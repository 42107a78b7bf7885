"""Machine shapes and GPU names: what a machine type is made of, in billed units.

Compute Engine bills a VM as vCPUs × a core price + GiB × a RAM price + GPUs × a GPU
price (https://cloud.google.com/compute/vm-instance-pricing,
https://cloud.google.com/compute/gpus-pricing); the price table (``skus.py``) holds those
unit prices, and this module says how many of each unit a machine type has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Shape", "gpu_key", "region_of", "shape"]


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


# N1 shapes follow from the name: n1-standard-N has 3.75 GB per vCPU, n1-highmem-N 6.5,
# n1-highcpu-N 0.9 (https://cloud.google.com/compute/docs/general-purpose-machines#n1_machines).
# Compute Engine's "GB" of machine memory is GiB: the API's machineTypes.memoryMb of
# n1-standard-4 is 15360 (MiB), which SkyPilot's catalog fetcher divides by 1024
# (skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py, _get_machine_type_for_zone).
_N1_GIB_PER_VCPU = {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9}
_N1 = re.compile(r"^n1-(standard|highmem|highcpu)-(\d+)$")

# GPU machine families with their GPUs built in: (vCPUs, GiB, GPU, count), from
# https://cloud.google.com/compute/docs/gpus#l4-gpus (G2),
# https://cloud.google.com/compute/docs/accelerator-optimized-machines#a2-vms (A2 Standard
# "highgpu"/"megagpu" with A100 40GB, A2 Ultra "ultragpu" with A100 80GB) and
# https://cloud.google.com/compute/docs/accelerator-optimized-machines#a3-high-vms (A3 High).
_TABLE: dict[str, tuple[float, float, str, int]] = {
    "g2-standard-4": (4, 16, "l4", 1),
    "g2-standard-8": (8, 32, "l4", 1),
    "g2-standard-12": (12, 48, "l4", 1),
    "g2-standard-16": (16, 64, "l4", 1),
    "g2-standard-24": (24, 96, "l4", 2),
    "g2-standard-32": (32, 128, "l4", 1),
    "g2-standard-48": (48, 192, "l4", 4),
    "g2-standard-96": (96, 384, "l4", 8),
    "a2-highgpu-1g": (12, 85, "a100-40gb", 1),
    "a2-highgpu-2g": (24, 170, "a100-40gb", 2),
    "a2-highgpu-4g": (48, 340, "a100-40gb", 4),
    "a2-highgpu-8g": (96, 680, "a100-40gb", 8),
    "a2-megagpu-16g": (96, 1360, "a100-40gb", 16),
    "a2-ultragpu-1g": (12, 170, "a100-80gb", 1),
    "a2-ultragpu-2g": (24, 340, "a100-80gb", 2),
    "a2-ultragpu-4g": (48, 680, "a100-80gb", 4),
    "a2-ultragpu-8g": (96, 1360, "a100-80gb", 8),
    "a3-highgpu-1g": (26, 234, "h100-80gb", 1),
    "a3-highgpu-2g": (52, 468, "h100-80gb", 2),
    "a3-highgpu-4g": (104, 936, "h100-80gb", 4),
    "a3-highgpu-8g": (208, 1872, "h100-80gb", 8),
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
    """The billed units of ``machine_type``; ``None`` for a type not in this table."""
    name = machine_type.strip().lower()
    if m := _N1.match(name):
        vcpus = int(m.group(2))
        return Shape("n1", vcpus, vcpus * _N1_GIB_PER_VCPU[m.group(1)])
    if name in _TABLE:
        vcpus, gib, gpu, gpus = _TABLE[name]
        return Shape(name.split("-", 1)[0], vcpus, gib, gpu, gpus)
    return None


def gpu_key(name: str) -> str | None:
    """One key per card for a GKE label, a Compute Engine type or a Vertex enum name."""
    return _GPU_KEYS.get(name.strip().lower())


def region_of(location: str) -> str | None:
    """``us-central1`` for ``us-central1`` or ``us-central1-a``; ``None`` if neither."""
    m = _LOCATION.match(location.strip().lower())
    return m.group(1) if m else None
