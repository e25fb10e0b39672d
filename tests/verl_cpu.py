"""What verl 0.9.1's own trainer needs to run on a CPU-only machine, for the tests.

Loaded in every process of a run (the driver, Ray's task runner, the FSDP
workers, the rollout server, the agent loop and reward workers) through verl's
``VERL_USE_EXTERNAL_MODULES=verl_cpu`` hook, with ``tests/`` on ``PYTHONPATH``:
``import verl`` imports this module at its end. Nothing of verl is edited; this
registers into verl's own registries:

- a ``cpu`` platform in verl's platform registry (selected with
  ``VERL_PLATFORM=cpu``): tensors stay on the CPU, collectives go over gloo, Ray
  schedules workers on logical GPUs (``ray_kwargs.ray_init.num_gpus``) so that
  verl's resource pools are built as on a GPU node;
- a rollout backend ``hf`` in both of verl's rollout registries (the replica
  registry the trainer builds servers from, and the adapter registry the hybrid
  workers build their weight-sync client from): a Ray actor that generates with
  the model in transformers, token in, token out, as verl's vLLM server does, and
  takes the actor's weights after every update. verl 0.9.1 generates only through
  vLLM, SGLang or TRT-LLM servers, none of which runs on a CPU here;
- three process-level patches: the gloo backend string (verl asks for
  ``cpu:gloo,cpu:gloo``, which torch refuses), ``Tensor.pin_memory`` as the
  identity (no accelerator to pin for), and verl's FSDP engines looked up as
  ``cuda`` ones (``VERL_ENGINE_DEVICE=cuda``, set by the test: they are
  registered for cuda and npu only; the engine itself runs on the CPU device).

- a checkpoint engine ``cpu_kv`` in verl's checkpoint-engine registry, for verl's
  ``separate_async`` mode (which refuses the in-process ``naive`` one: its rollout
  replicas run apart from the trainer): the actor's rank 0 puts the full weights of a
  version in Ray's internal key-value store, every rollout worker reads that version
  (verl's GPU backends, NCCL and others, need an accelerator).

The rollout honours ``rollout.load_format``: with ``dummy`` the server starts
from random weights, so a rollout whose log-probs match the actor's shows that
the actor's weights reached it (nothing else could make them match).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import types
from typing import Any

import torch
import torch.distributed

# ----------------------------------------------------------------------------- patches


def _gloo_only(backend: Any) -> Any:
    """``cpu:gloo,cpu:gloo`` (verl's ``cpu:gloo,{device}:{backend}`` on the CPU) -> ``gloo``."""
    if isinstance(backend, str) and "," in backend:
        parts = {p.strip() for p in backend.split(",")}
        if parts <= {"cpu:gloo", "gloo"}:
            return "gloo"
    return backend


if not getattr(torch.distributed.init_process_group, "_verl_cpu", False):
    _init_process_group = torch.distributed.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if "backend" in kwargs:
            kwargs["backend"] = _gloo_only(kwargs["backend"])
        elif args:
            args = (_gloo_only(args[0]), *args[1:])
        return _init_process_group(*args, **kwargs)

    init_process_group._verl_cpu = True  # type: ignore[attr-defined]
    torch.distributed.init_process_group = init_process_group

if not torch.cuda.is_available():
    # Pinned host memory needs an accelerator; on a CPU-only machine pinning is the identity.
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self  # type: ignore[method-assign]


# ----------------------------------------------------------------------------- the platform


def _device_module() -> types.ModuleType:
    """A stand-in for ``torch.cuda`` on the CPU: device 0, nothing to free or synchronise."""
    mod = types.ModuleType("verl_cpu_device")
    nothing = lambda *args, **kwargs: None  # noqa: E731
    zero = lambda *args, **kwargs: 0  # noqa: E731
    for name in (
        "empty_cache",
        "synchronize",
        "set_device",
        "reset_peak_memory_stats",
        "reset_max_memory_allocated",
        "ipc_collect",
        "set_per_process_memory_fraction",
    ):
        setattr(mod, name, nothing)
    for name in (
        "current_device",
        "memory_allocated",
        "memory_reserved",
        "max_memory_allocated",
        "max_memory_reserved",
    ):
        setattr(mod, name, zero)
    mod.device_count = lambda: 1
    mod.is_available = lambda: True
    mod.is_initialized = lambda: True
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    mod.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    mod.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    mod.mem_get_info = lambda *args, **kwargs: (64 << 30, 64 << 30)
    mod.memory_stats = lambda *args, **kwargs: {}
    mod.Stream = torch.cpu.Stream
    mod.Event = torch.cpu.Event if hasattr(torch.cpu, "Event") else None
    mod.stream = lambda *args, **kwargs: contextlib.nullcontext()
    mod.current_stream = torch.cpu.current_stream
    mod.device = lambda *args, **kwargs: contextlib.nullcontext()
    mod.get_device_name = lambda *args, **kwargs: "CPU"
    return mod


class _CPUPlatform:
    """verl on the CPU: device ``cpu``, gloo, Ray's logical GPUs as the worker slots."""

    device_name = "cpu"
    vendor_name = "cpu"

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> torch.device:
        # verl passes it as a device (`model.to(device=get_device_id())`), where 0
        # would mean the accelerator
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None


def _register_platform() -> None:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    device = _device_module()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(_CPUPlatform, PlatformBase):
        """verl on the CPU (:class:`_CPUPlatform`) with the CPU's device module."""

        device_module = device


# ----------------------------------------------------------------------------- the rollout

ROLLOUT_NAME = "hf"


def _server_name(replica_rank: int) -> str:
    return f"{ROLLOUT_NAME}_server_{replica_rank}_0"


class HFServer:
    """A rollout server: the model in transformers, token in, token out (verl's ``generate``).

    One request at a time (a lock), which also keeps a weight update from landing in the
    middle of a sequence. Log-probs are ``log_softmax(logits / temperature)`` of the sampled
    token, the quantity verl's actor computes (``actor/...`` old log-probs).
    """

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass

        self.config = omega_conf_to_dataclass(config)
        if not hasattr(model_config, "local_path"):  # the replica may hand on the DictConfig
            model_config = omega_conf_to_dataclass(model_config)
        self.model_config = model_config
        self.replica_rank = replica_rank
        torch.set_num_threads(1)
        path = model_config.local_path
        if str(self.config.load_format).startswith("dummy"):
            # verl's dummy load: random weights until the first sync from the actor
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(12345 + replica_rank)
                self.model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
        else:
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.model.eval()
        generation = getattr(self.model, "generation_config", None)
        eos = getattr(generation, "eos_token_id", None)
        eos = eos if isinstance(eos, list) else [eos]
        tok_eos = getattr(model_config, "tokenizer", None)
        tok_eos = getattr(tok_eos, "eos_token_id", None)
        self.eos_ids = {int(t) for t in [*eos, tok_eos] if t is not None}
        self.global_steps: int | None = None
        self.syncs = 0
        self.lock = threading.Lock()
        self.rng = torch.Generator().manual_seed(int(self.config.seed or 0) + replica_rank)

    # ------------------------------------------------------------------ generation

    def _sample(
        self, prompt_ids: list[int], params: dict[str, Any]
    ) -> tuple[list[int], list[float]]:
        temperature = float(params.get("temperature", 1.0))
        top_k = int(params.get("top_k", -1) or -1)
        top_p = float(params.get("top_p", 1.0))
        ignore_eos = bool(params.get("ignore_eos", False))
        max_tokens = int(params["max_tokens"])
        ids = torch.tensor([prompt_ids])
        past, out, logps = None, [], []
        with torch.no_grad():
            for _ in range(max_tokens):
                res = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[0, -1].float()
                if temperature <= 0:
                    token = int(logits.argmax())
                    logp = float(torch.log_softmax(logits, -1)[token])
                else:
                    scaled = logits / temperature
                    full = torch.log_softmax(scaled, -1)
                    masked = scaled.clone()
                    if 0 < top_k < masked.numel():
                        kth = torch.topk(masked, top_k).values[-1]
                        masked[masked < kth] = -float("inf")
                    if top_p < 1.0:
                        order = torch.sort(masked, descending=True)
                        cum = torch.softmax(order.values, -1).cumsum(-1)
                        drop = cum - torch.softmax(order.values, -1) > top_p
                        masked[order.indices[drop]] = -float("inf")
                    token = int(torch.multinomial(torch.softmax(masked, -1), 1, generator=self.rng))
                    logp = float(full[token])
                out.append(token)
                logps.append(logp)
                if token in self.eos_ids and not ignore_eos:
                    break
                ids = torch.tensor([[token]])
        return out, logps

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        params = dict(sampling_params)
        prompt_ids = [int(t) for t in prompt_ids]
        room = int(
            self.config.max_model_len or (self.config.prompt_length + self.config.response_length)
        )
        room -= len(prompt_ids)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens leaves no room to generate")
        wanted = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if wanted is None:
            wanted = min(
                self.config.response_length,
                self.config.prompt_length + self.config.response_length - len(prompt_ids),
            )
        params["max_tokens"] = max(1, min(int(wanted), room))
        want_logprobs = bool(params.pop("logprobs", False))

        def run() -> tuple[list[int], list[float]]:
            with self.lock:
                return self._sample(prompt_ids, params)

        tokens, logps = await asyncio.to_thread(run)
        return TokenOutput(
            token_ids=tokens,
            log_probs=logps if want_logprobs else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    # ------------------------------------------------------------------ weights

    def load_weights(self, named: dict[str, torch.Tensor], global_steps: int | None) -> int:
        """Take the actor's full weights (HF names); return how many tensors were loaded."""
        own = self.model.state_dict()
        unknown = sorted(set(named) - set(own))
        if unknown:
            raise KeyError(f"the rollout model has no parameters {unknown[:5]}")
        tied = (
            {"lm_head.weight"}
            if getattr(self.model.config, "tie_word_embeddings", False)
            else set()
        )
        missing = sorted(set(own) - set(named) - tied)
        missing = [m for m in missing if not m.endswith("rotary_emb.inv_freq")]
        if missing:
            raise KeyError(f"the actor sent no weights for {missing[:5]}")
        with self.lock, torch.no_grad():
            for name, value in named.items():
                own[name].copy_(value.to(own[name].dtype))
            if tied:
                self.model.tie_weights()
        self.syncs += 1
        if global_steps is not None:
            self.global_steps = global_steps
        return len(named)

    def sync_count(self) -> int:
        return self.syncs

    # ------------------------------------------------------------------ verl's control calls

    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def abort_all_requests(
        self, reset_prefix_cache: bool = True, reject_request: bool = False
    ):
        return {"aborted": 0}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True):
        return {"aborted": 0}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    def get_server_address(self) -> tuple[str, int]:
        return "127.0.0.1", 0


def _register_rollout() -> None:
    import ray
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.base import BaseRollout
    from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry

    class HFReplica(RolloutReplica):
        """One :class:`HFServer` actor per replica (rollout world size 1 per replica)."""

        async def launch_servers(self) -> None:
            server = (
                ray.remote(HFServer)
                .options(
                    name=_server_name(self.replica_rank) + self.name_suffix,
                    max_concurrency=self.max_concurrency,
                    num_cpus=0,
                    runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
                )
                .remote(self.config, self.model_config, self.replica_rank)
            )
            self.servers.append(server)
            self._server_handle = server
            self._server_address = f"{ROLLOUT_NAME}-replica-{self.replica_rank}"

    class HFServerAdapter(BaseRollout):
        """The hybrid worker's side: hands the actor's full weights to its replica's server."""

        def __init__(self, config, model_config, device_mesh, replica_rank: int = -1) -> None:
            super().__init__(config, model_config, device_mesh)
            rank = int(os.environ.get("RANK", 0))
            world = (
                self.config.tensor_model_parallel_size
                * self.config.data_parallel_size
                * self.config.pipeline_model_parallel_size
            )
            self.replica_rank = rank // world if replica_rank == -1 else replica_rank
            self.has_server = rank % world == 0
            self.server = None

        def _handle(self):
            if self.server is None:
                self.server = ray.get_actor(_server_name(self.replica_rank))
            return self.server

        async def resume(self, tags: list[str]) -> None:
            return None

        async def release(self) -> None:
            return None

        async def update_weights(
            self, weights, global_steps=None, wire_format="named_tensors", **kwargs
        ):
            if wire_format != "named_tensors":
                raise NotImplementedError(
                    f"the hf rollout takes named tensors, not {wire_format!r}"
                )
            from verl.workers.rollout.utils import ensure_async_iterator

            named = {}
            # every rank walks the generator: gathering a sharded tensor is a collective;
            # a checkpoint engine's receive_weights is an async one (separate_async)
            async for name, tensor in ensure_async_iterator(weights):
                if hasattr(tensor, "full_tensor"):
                    tensor = tensor.full_tensor()
                named[name] = tensor.detach().to("cpu", torch.float32).clone()
            if self.has_server:
                await self._handle().load_weights.remote(named, global_steps)

    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFServerAdapter"
    globals()["HFServerAdapter"] = HFServerAdapter
    globals()["HFReplica"] = HFReplica
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFReplica)


def _register_checkpoint_engine() -> None:
    import asyncio
    import pickle

    from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

    def key(global_steps: int | None) -> bytes:
        return f"verl_cpu/weights/{global_steps}".encode()

    class KVCheckpointEngine(CheckpointEngine):
        """Weights through Ray's internal key-value store, one entry per version."""

        def __init__(self, bucket_size: int = 0, is_master: bool = False, **_: Any) -> None:
            self.is_master = is_master

        def prepare(self) -> dict[str, Any]:
            return {}

        @classmethod
        def build_topology(cls, actor_wg_world_size, rollout_world_size, metadata):
            return {"rank": list(range(actor_wg_world_size))}, {"rank": [-1] * rollout_world_size}

        def init_process_group(self, rank: int = -1, **_: Any) -> None:
            self.rank = rank

        def finalize(self) -> None:
            return None

        async def send_weights(self, weights, global_steps=None):
            from ray.experimental import internal_kv

            named = {}
            # every rank walks the generator: gathering a sharded tensor is a collective
            for name, tensor in weights:
                if hasattr(tensor, "full_tensor"):
                    tensor = tensor.full_tensor()
                named[name] = tensor.detach().to("cpu", torch.float32).clone()
            if self.is_master:
                internal_kv._internal_kv_put(key(global_steps), pickle.dumps(named), overwrite=True)
            return {}

        async def receive_weights(self, global_steps=None):
            from ray.experimental import internal_kv

            while (blob := internal_kv._internal_kv_get(key(global_steps))) is None:
                await asyncio.sleep(0.05)  # the actor's send runs concurrently
            for name, tensor in pickle.loads(blob).items():
                yield name, tensor

    CheckpointEngineRegistry._registry.setdefault("cpu_kv", KVCheckpointEngine)


_register_platform()
_register_rollout()
_register_checkpoint_engine()
