"""The launch environment: who am I in the job, read from what the launcher set.

torchrun (and any launcher that copies its contract) sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT; SLURM sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and a node
list; a Cloud TPU pod slice sets none of these and is described by its own metadata, which only
``jax.distributed.initialize()`` reads. Nothing here imports an engine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from neurenix_core.errors import DistributedError, WorldSizeMismatchError
from neurenix_core.kwargs import strict_kwargs

__all__ = ["LaunchEnv", "read_launch_env"]


@dataclass(frozen=True, slots=True)
class LaunchEnv:
    """One process's place in the job. ``source`` says which launcher described it:
    "torchrun", "env" (RANK/WORLD_SIZE set by hand), "slurm", "tpu-pod" (left to jax) or "single"."""

    source: str
    rank: int
    world_size: int
    local_rank: int
    master_addr: str | None
    master_port: int | None
    agent_store: bool  # torchrun's agent hosts the TCPStore at MASTER_ADDR:MASTER_PORT
    run_id: str

    @property
    def rendezvous(self) -> bool:
        """True when the processes meet at MASTER_ADDR:MASTER_PORT (a TCPStore there)."""
        return self.master_addr is not None and self.master_port is not None


def _int(env: Mapping[str, str], name: str, source: str) -> int:
    raw = env.get(name, "")
    try:
        value = int(raw)
    except ValueError:
        raise DistributedError(
            f"nx.distributed.init: {name}={raw!r} (set by {source}) is not an integer; fix the launch command"
        ) from None
    if value < 0:
        raise DistributedError(f"nx.distributed.init: {name}={value} (set by {source}) is negative; fix the launch command")
    return value


def _first_slurm_host(nodelist: str) -> str:
    # "node[03-05,07]" -> "node03"; "a1,b2" -> "a1": the first node hosts the rendezvous, as srun users expect.
    m = re.match(r"([^,\[]+)(?:\[(\d+))?", nodelist)
    return (m.group(1) + (m.group(2) or "")) if m else nodelist


def _torchrun(env: Mapping[str, str]) -> LaunchEnv:
    source = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
    rank, world = _int(env, "RANK", source), _int(env, "WORLD_SIZE", source)
    local = _int(env, "LOCAL_RANK", source) if "LOCAL_RANK" in env else 0
    addr, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if world >= 2 and (not addr or not port):
        raise DistributedError(
            f"nx.distributed.init: RANK={rank} WORLD_SIZE={world} but MASTER_ADDR/MASTER_PORT are not set; launch with "
            "torchrun (it sets them) or export the address and port of rank 0"
        )
    return LaunchEnv(source, rank, world, local, addr or None, _int(env, "MASTER_PORT", source) if port else None,
                     env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
                     f"{env.get('TORCHELASTIC_RUN_ID', 'env')}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}")


def _slurm(env: Mapping[str, str]) -> LaunchEnv:
    rank, world = _int(env, "SLURM_PROCID", "SLURM"), _int(env, "SLURM_NTASKS", "SLURM")
    addr = env.get("MASTER_ADDR") or _first_slurm_host(env.get("SLURM_JOB_NODELIST", env.get("SLURM_NODELIST", "")))
    # A port every task derives alike from the job id, unless the batch script exports one.
    port = _int(env, "MASTER_PORT", "SLURM") if "MASTER_PORT" in env else 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000
    local = _int(env, "SLURM_LOCALID", "SLURM") if "SLURM_LOCALID" in env else 0
    return LaunchEnv("slurm", rank, world, local, addr or None, port, False, f"slurm.{env.get('SLURM_JOB_ID', '0')}")


@strict_kwargs("nx.distributed.read_launch_env")
def read_launch_env(env: Mapping[str, str] | None = None) -> LaunchEnv:
    """This process's rank and world from the launcher's variables (``os.environ`` by default)."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        launch = _torchrun(env)
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        launch = _slurm(env)
    elif env.get("TPU_WORKER_HOSTNAMES") or env.get("CLOUD_TPU_TASK_ID"):
        # A Cloud TPU VM: rank and world come from its metadata server, through jax.distributed.
        return LaunchEnv("tpu-pod", -1, -1, 0, None, None, False, "tpu-pod")
    else:
        return LaunchEnv("single", 0, 1, 0, None, None, False, "single")
    if launch.world_size < 1 or launch.rank >= launch.world_size:
        raise _rank_out_of_range(launch)
    return launch


def _rank_out_of_range(launch: LaunchEnv) -> WorldSizeMismatchError:
    return WorldSizeMismatchError(
        f"nx.distributed.init: rank {launch.rank} was launched with world size {launch.world_size} ({launch.source}); "
        "a rank must be below the world size: fix the launch command (e.g. torchrun --nproc-per-node)"
    )
