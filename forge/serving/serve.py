"""`build.py serve`: the exact `docker run ... vllm serve ...` command for a recipe on a built image,
or, with --nodes N, one command per node of a recipe's multi-node layout (vLLM's native
multi-node engine: --nnodes/--node-rank/--master-addr/--master-port, --headless on workers).

Every flag is checked against the vLLM release's own parser definitions (forge.serving.vllm_args), so a
recipe never emits a flag that release lacks: the command refuses with a line naming the
recipe field instead. Settings that only exist to select a behaviour the release does not have
are adapted (dropped) where that is exactly equivalent, and say so on stderr.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from forge.errors import ForgeError
from forge.serving import vllm_args
from forge.serving.recipes import (
    ENGINE_SETTINGS,
    RUNNER_ENV,
    Recipe,
    check_extra_args_repeat_nothing,
    load_recipe,
    recipe_field,
)
from forge.serving.serve_flags import cli_value, flag_groups
from forge.untrusted import visible

CONTAINER_PORT = 8000
CONTAINER_HF_CACHE = "/root/.cache/huggingface"
# Hugging Face token passed through from the caller's environment (Gemma weights are gated).
PASSTHROUGH_ENV = ("HF_TOKEN",)


DEFAULT_MASTER_PORT = 29501
SYS_INFINIBAND = "/sys/class/infiniband"
# Per-node NCCL settings of the two-DGX-Spark launch scripts: NCCL takes the RoCE devices
# (NCCL_IB_HCA) over the interconnect, and ignores the container's CPU affinity mask.
NCCL_FIXED_ENV = {"NCCL_IB_DISABLE": "0", "NCCL_IGNORE_CPU_AFFINITY": "1"}
# Every socket library that picks an interface on its own must take the interconnect one.
SOCKET_IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")


@dataclass(frozen=True)
class ServePlan:
    argv: list[str]
    notes: list[str]          # adaptations made for this release, printed to stderr

    def shell(self) -> str:
        return command_line(self.argv)


@dataclass(frozen=True)
class Interconnect:
    """Where the nodes meet: the master's address and port, each node's own address on the
    interconnect, the interface carrying it and the RoCE devices NCCL may use."""
    master_addr: str
    node_ips: tuple[str, ...]
    interface: str
    ib_hcas: tuple[str, ...] = ()
    master_port: int = DEFAULT_MASTER_PORT


@dataclass(frozen=True)
class NodeCommand:
    """One node's `vllm serve` invocation: its environment and the arguments after `vllm`."""
    rank: int
    env: dict[str, str]
    vllm_args: list[str]                       # ["serve", MODEL, ...]
    headless: bool = False

    def bare_shell(self) -> str:
        """The command without docker: `env K=V ... vllm serve ...`."""
        return command_line(["env", *[f"{k}={v}" for k, v in sorted(self.env.items())], "vllm",
                             *self.vllm_args])


@dataclass(frozen=True)
class MultiNodePlan:
    nodes: list[NodeCommand]
    argvs: list[list[str]]                     # the docker argv of each node, by rank
    notes: list[str]

    def shell(self) -> str:
        lines = []
        for node, argv in zip(self.nodes, self.argvs):
            role = "worker, headless" if node.headless else "API server"
            lines.append(f"# node {node.rank} ({role})")
            lines.append(command_line(argv))
        return "\n".join(lines)


def command_line(argv: list[str]) -> str:
    """`argv` as one shell line for a user to read and paste. shlex quotes a control character
    but leaves it raw, for the terminal to act on, and an escaped one would change the command:
    a token holding one is refused (the recipe's fields and --hf-cache are checked before this)."""
    for token in argv:
        if not token.isprintable():
            raise ForgeError(f"the command line would hold a control character: {visible(token)}")
    return shlex.join(argv)


def plan_serve(recipe_name: str, target: str, vllm: str, repository: str | None = None,
               port: int = 8000, hf_cache: str = "~/.cache/huggingface",
               recipes_dir: str | None = None) -> ServePlan:
    recipe, release, env, notes = _checked_recipe(recipe_name, target, vllm, recipes_dir)
    from forge.image_names import image_ref

    argv = docker_argv(image_ref(target, release.version, repository), recipe, env, port, hf_cache)
    return ServePlan(argv, notes)


def _checked_recipe(recipe_name: str, target: str, vllm: str, recipes_dir: str | None):
    """(recipe, the release's parser facts, engine environment, notes), the recipe checked
    against that release."""
    from forge.targets import get_target
    from forge.versions import Release

    version = Release(vllm)
    get_target(target)   # an unknown target: the one message every command gives
    recipe = load_recipe(recipe_name, target, Path(recipes_dir) if recipes_dir else None)
    if not recipe.admits(version):
        raise ForgeError(f"{_where(recipe)}.vllm: the recipe is for vLLM {recipe.vllm}, "
                         f"not {version}")
    from forge.serving.vllm_args import release_args

    release = release_args(version)
    env, notes = _runner_env(recipe, release)
    check_for_release(recipe, release)
    return recipe, release, env, notes + unchecked_notes(recipe, release)


def unchecked_notes(recipe: Recipe, release) -> list[str]:
    """One line per flag the recipe gives whose values the release reads with a converter the
    project does not know (checked as strings: vLLM judges them at start)."""
    flags = {setting.flag for setting in ENGINE_SETTINGS if setting.value(recipe) is not None}
    flags |= {group.flag for group in flag_groups(list(recipe.serve.extra_args))}
    return sorted({note for note in map(release.unchecked_note, flags) if note})


def plan_multi_node(recipe_name: str, target: str, vllm: str, nodes: int, network: Interconnect,
                    repository: str | None = None, port: int = 8000,
                    hf_cache: str = "~/.cache/huggingface",
                    recipes_dir: str | None = None) -> MultiNodePlan:
    """One docker command per node for the recipe's `nodes`-node layout, every flag checked
    against the release's parser like the single-node command."""
    recipe, release, env, notes = _checked_recipe(recipe_name, target, vllm, recipes_dir)
    layout = layout_for(recipe, nodes)
    commands = node_commands(recipe, layout, network, port, env)
    check_node_flags(commands, release, recipe)
    from forge.image_names import image_ref

    image = image_ref(target, release.version, repository)
    argvs = [node_docker_argv(image, node, hf_cache, network) for node in commands]
    return MultiNodePlan(commands, argvs, notes)


def layout_for(recipe: Recipe, nodes: int):
    """The recipe's layout for `nodes` nodes; refuses a count it states none for, and names the
    upstream issue where the only way to split the model that far is known to fail."""
    if nodes < 2:
        raise ForgeError(f"--nodes: a multi-node layout spans 2 or more nodes (got {nodes})")
    layout = recipe.layout(nodes)
    if layout is not None:
        return layout
    from forge.serving.recipes import known_failure

    # One GPU a node (a DGX Spark pair): N nodes split the model N ways by tensor parallel.
    failure = known_failure(recipe.base_model, recipe.weights, nodes,
                            recipe.path.parent if recipe.path else None)
    if failure:
        raise ForgeError(f"{_where(recipe)}.multi_node: no {nodes}-node layout: {failure}")
    stated = ", ".join(str(layout.nodes) for layout in recipe.multi_node) or "none"
    raise ForgeError(f"{_where(recipe)}.multi_node: no layout for {nodes} nodes "
                     f"(layouts for: {stated})")


def node_commands(recipe: Recipe, layout, network: Interconnect, port: int,
                  env: dict[str, str] | None = None) -> list[NodeCommand]:
    """Each node's environment and `vllm serve` arguments. Rank 0 serves the API on `port`;
    the others run headless (engine workers only)."""
    if len(network.node_ips) != layout.nodes:
        raise ForgeError(f"--node-ips: {layout.nodes} nodes need {layout.nodes} addresses "
                         f"(got {len(network.node_ips)}: {','.join(network.node_ips)})")
    if not 0 < network.master_port < 65536:
        raise ForgeError(f"--master-port: not a TCP port: {network.master_port}")
    if not 0 < port < 65536:
        raise ForgeError(f"--port: not a TCP port: {port}")
    base_env = dict(recipe.env() if env is None else env)
    commands = []
    for rank, node_ip in enumerate(network.node_ips):
        node_env = {**base_env, **node_network_env(network, node_ip)}
        args = ["serve", recipe.model, *recipe.cli_args(),
                "--tensor-parallel-size", str(layout.tensor_parallel_size),
                "--pipeline-parallel-size", str(layout.pipeline_parallel_size),
                "--nnodes", str(layout.nodes), "--node-rank", str(rank),
                "--master-addr", network.master_addr, "--master-port", str(network.master_port)]
        args += ["--headless"] if rank else ["--port", str(port)]
        commands.append(NodeCommand(rank, node_env, args, headless=rank > 0))
    return commands


def node_network_env(network: Interconnect, node_ip: str) -> dict[str, str]:
    env = {"VLLM_HOST_IP": node_ip, **NCCL_FIXED_ENV}
    env.update({name: network.interface for name in SOCKET_IFNAME_VARS})
    if network.ib_hcas:
        env["NCCL_IB_HCA"] = ",".join(network.ib_hcas)
    return env


def check_node_flags(commands: list[NodeCommand], release, recipe: Recipe) -> None:
    """Every flag of every node's command exists in the release's `vllm serve`, and every
    vLLM variable it sets is one the release reads."""
    for node in commands:
        for token in node.vllm_args[2:]:
            if token.startswith("--") and not release.has_flag(token):
                raise ForgeError(f"{_where(recipe)}.multi_node: node {node.rank} needs {token}, "
                                 f"which vLLM {release.version}'s `vllm serve` does not have")
        for name in node.env:
            if name.startswith("VLLM_") and name not in release.env_vars:
                raise ForgeError(f"{_where(recipe)}.serve.env: vLLM {release.version} does not "
                                 f"read {name}")


def node_docker_argv(image: str, node: NodeCommand, hf_cache: str,
                     network: Interconnect) -> list[str]:
    # Host networking: NCCL, Gloo and vLLM's own sockets bind the interconnect's address;
    # --ipc=host for NCCL's shared memory. RoCE needs the verbs devices inside the container.
    argv = ["docker", "run", "--rm", "--gpus", "all", "--ipc=host", "--network", "host",
            "-v", f"{_host_path(hf_cache)}:{CONTAINER_HF_CACHE}"]
    if network.ib_hcas:
        argv += ["--device", "/dev/infiniband", "--ulimit", "memlock=-1"]
    for name in PASSTHROUGH_ENV:
        argv += ["-e", name]
    for name, value in sorted(node.env.items()):
        argv += ["-e", f"{name}={value}"]
    return argv + ["--entrypoint", "vllm", image, *node.vllm_args]


# ---------------------------------------------------------------------------------------------
# Interconnect detection (this host's view; every value can be given instead)


def detect_interconnect(master_addr: str, node_ips: list[str] | None, interface: str | None,
                        ib_hcas: list[str] | None, master_port: int, nodes: int,
                        sys_infiniband: str = SYS_INFINIBAND) -> Interconnect:
    """Fill what was not given: the interface is the one carrying the master address
    (`ip -j route get`, or the interface holding it on the master itself), this node's address
    is that route's source, the RoCE devices are those under /sys/class/infiniband."""
    route = route_to(master_addr)
    interface = interface or route["dev"]
    if node_ips is None:
        raise ForgeError(f"--node-ips: give the {nodes} nodes' addresses on the interconnect, "
                         f"in rank order (node 0 is the master, {master_addr}; this host's is "
                         f"{route['src']} on {interface})")
    if node_ips[0] != master_addr:
        raise ForgeError(f"--node-ips: node 0 runs the master: its address must be "
                         f"--master-addr {master_addr} (got {node_ips[0]})")
    hcas = tuple(ib_hcas) if ib_hcas is not None else tuple(roce_devices(sys_infiniband))
    return Interconnect(master_addr, tuple(node_ips), interface, hcas, master_port)


def route_to(address: str) -> dict[str, str]:
    """{"dev": interface, "src": this host's address} for reaching `address`. On the master
    itself the route is `local ... dev lo`: take the interface that holds the address."""
    if shutil.which("ip") is None:
        raise ForgeError("--ifname: cannot detect the interconnect interface without `ip` "
                         "(iproute2): give --ifname and --node-ips")
    held = _interface_holding(address)
    if held:
        return {"dev": held, "src": address}
    result = subprocess.run(["ip", "-j", "route", "get", address], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise ForgeError(f"--master-addr: no route to {address}: {result.stderr.strip()}")
    route = json.loads(result.stdout)[0]
    return {"dev": route["dev"], "src": route.get("prefsrc", "")}


def _interface_holding(address: str) -> str | None:
    result = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        return None
    for link in json.loads(result.stdout or "[]"):
        if any(info.get("local") == address for info in link.get("addr_info", [])):
            return link["ifname"]
    return None


def roce_devices(sys_infiniband: str = SYS_INFINIBAND) -> list[str]:
    """RDMA devices the kernel lists (a DGX Spark's ConnectX-7 shows two RoCE devices);
    those with an Ethernet link layer only, as NCCL_IB_HCA takes them."""
    root = Path(sys_infiniband)
    if not root.is_dir():
        return []
    devices = []
    for device in sorted(root.iterdir()):
        layers = {p.read_text().strip() for p in device.glob("ports/*/link_layer")}
        if "Ethernet" in layers:
            devices.append(device.name)
    return devices


def docker_argv(image: str, recipe: Recipe, env: dict[str, str], port: int,
                hf_cache: str) -> list[str]:
    if not 0 < port < 65536:
        raise ForgeError(f"--port: not a TCP port: {port}")
    argv = ["docker", "run", "--rm", "--gpus", "all", "--ipc=host",
            "-p", f"{port}:{CONTAINER_PORT}",
            "-v", f"{_host_path(hf_cache)}:{CONTAINER_HF_CACHE}"]
    for name in PASSTHROUGH_ENV:
        argv += ["-e", name]
    for name, value in sorted(env.items()):
        argv += ["-e", f"{name}={value}"]
    # --entrypoint: the upstream base's ENTRYPOINT is already `vllm serve`; naming the
    # program here makes the command mean the same whatever the image's entrypoint is.
    argv += ["--entrypoint", "vllm", image, "serve", recipe.model, *recipe.cli_args()]
    return argv


def release_env(recipe: Recipe, release) -> tuple[dict[str, str], list[str]]:
    """The recipe's engine environment on `release` and the notes on what was adapted, or the
    one-line refusal `serve` gives (a V1 recipe on a release without the V1 runner)."""
    return _runner_env(recipe, release)


def _runner_env(recipe: Recipe, release) -> tuple[dict[str, str], list[str]]:
    env = recipe.env()
    runner = recipe.serve.model_runner
    if runner == "v1" and "v1" not in release.runners:
        raise ForgeError(f"{_where(recipe)}.serve.model_runner: v1: vLLM {release.version} has no V1 "
                         f"runner ({vllm_args.RUNNER_MODULES['v1']} is gone; removed in 0.34.0): "
                         "serve this recipe with an earlier release until it is measured on V2")
    if RUNNER_ENV in release.env_vars:
        return env, []
    if runner == "v2" and "v1" in release.runners:
        raise ForgeError(f"{_where(recipe)}.serve.model_runner: v2 needs {RUNNER_ENV}, "
                         f"which vLLM {release.version} does not read")
    # A release without the switch has one runner, the recipe's: the setting is moot there (0.34.0
    # refuses VLLM_USE_V2_MODEL_RUNNER=0 at start and warns that =1 is redundant).
    del env[RUNNER_ENV]
    return env, [f"note: vLLM {release.version} has no {RUNNER_ENV} ({runner.upper()} only); not set"]


def installed_runs_v2_only(site_packages: str | None = None, release: str | None = None) -> bool:
    """Whether the vLLM installed here (or in `site_packages`) has the V2 runner alone (0.34.0 on):
    its engines run V2 without the switch, and log no "Using V2 Model Runner" line to say so.
    `release`: the engine's own (a server's log names it): the install only speaks for that one."""
    from forge.patching.installed import find_vllm

    try:
        installed = find_vllm(site_packages)
    except ForgeError:
        return False
    if release is not None and installed.version != Version(release):
        return False
    return vllm_args.runners_in(installed.site_dir) == {"v2"}


def installed_runner_env(env: dict[str, str], runner: str, recipe: Recipe,
                         site_packages: str | None = None) -> dict[str, str]:
    """An engine's environment for the vLLM installed here (or in `site_packages`), as
    _runner_env adapts it to a release: without the V1 runner (0.34.0 on) no runner switch, and
    a V1 engine refused before its start. Unchanged where no vLLM is found: its start says so."""
    from forge.patching.installed import find_vllm

    try:
        installed = find_vllm(site_packages)
    except ForgeError:
        return env
    if "v1" in vllm_args.runners_in(installed.site_dir):
        return env
    if runner == "v1":
        raise ForgeError(f"{_where(recipe)}.serve.model_runner: v1: the vLLM {installed.version} at "
                         f"{installed.package_dir} has no V1 runner (removed in 0.34.0): pass "
                         "--runner v2 to measure it on the runner it has")
    return {k: v for k, v in env.items() if k != RUNNER_ENV}


def check_for_release(recipe: Recipe, release) -> None:
    """Refuse (one line naming the recipe field) anything the release's parser would reject:
    a missing flag, a value outside the flag's Literal choices, an unknown speculative key or
    method, an engine keyword vllm.LLM would not accept."""
    _check_flags(recipe, release)
    _check_speculative(recipe, release)
    for name in recipe.engine_kwargs():
        if name != "model" and name not in release.engine_fields:
            raise ForgeError(f"{_where(recipe)}.serve: {name} is not an EngineArgs field in "
                             f"vLLM {release.version}")


def _check_flags(recipe: Recipe, release) -> None:
    for setting in ENGINE_SETTINGS:
        value = setting.value(recipe)
        if value is None:
            continue
        field_name = recipe_field(setting.kwarg)
        if not release.has_flag(setting.flag):
            raise ForgeError(f"{_where(recipe)}.{field_name}: needs {setting.flag}, "
                             f"which vLLM {release.version}'s `vllm serve` does not have")
        allowed = release.choices.get(setting.flag)
        if allowed and str(value) not in allowed:
            raise ForgeError(f"{_where(recipe)}.{field_name}: vLLM {release.version} accepts "
                             f"{setting.flag} {' | '.join(sorted(allowed))}, not {value!r}")
        # The same argparse check the extra flags get: a value the field's schema admits
        # may still be one this release reads otherwise.
        problem = release.value_problem(setting.flag, [cli_value(value)])
        if problem:
            raise ForgeError(f"{_where(recipe)}.{field_name}: vLLM {release.version}'s "
                             f"{setting.flag} {problem}")
    _check_extra_args(recipe, release)


def _check_extra_args(recipe: Recipe, release) -> None:
    """Each extra_args flag exists in the release, repeats no structured field (by any of its
    spellings there) and has values the release's own argparse action takes."""
    where = _where(recipe)
    check_extra_args_repeat_nothing(recipe, where, release.canonical)
    for group in flag_groups(list(recipe.serve.extra_args)):
        here = f"{where}.serve.extra_args[{group.index}]"
        if not release.has_flag(group.flag):
            raise ForgeError(f"{here}: {group.flag} is not a `vllm serve` flag in vLLM "
                             f"{release.version}")
        problem = release.value_problem(group.flag, group.values)
        if problem:
            raise ForgeError(f"{here}: vLLM {release.version}'s {group.flag} {problem}")


def _check_speculative(recipe: Recipe, release) -> None:
    for key in recipe.speculative_config():
        if key not in release.speculative_fields:
            raise ForgeError(f"{_where(recipe)}.speculative: vLLM {release.version}'s "
                             f"SpeculativeConfig has no field {key!r}")
    if recipe.speculative.method not in release.speculative_methods:
        raise ForgeError(f"{_where(recipe)}.speculative.method: vLLM {release.version} has no "
                         f"speculative method {recipe.speculative.method!r}")


def _where(recipe: Recipe) -> str:
    return recipe.where


def _host_path(path: str) -> str:
    if not path.isprintable():
        raise ForgeError(f"--hf-cache: holds a control character ({visible(path)}); name a "
                         "folder whose name can be shown and pasted")
    # docker -v needs an absolute host path; "~" is not expanded by docker.
    return os.path.abspath(os.path.expanduser(path))


def run_plan(plan: ServePlan) -> int:
    if shutil.which(plan.argv[0]) is None:
        raise ForgeError(f"--run: {plan.argv[0]} is not installed (the command is: {plan.shell()})")
    print(f"+ {plan.shell()}", file=sys.stderr, flush=True)
    return subprocess.run(plan.argv, check=False).returncode
