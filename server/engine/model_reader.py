"""Reading a model for a load: its config (the file, or a load request's override) checked,
completed and normalized, the backend class that serves it, the versions its policy selects,
its labels, in the order tritonserver does it at poll.

Blocking (it reads files, and auto-complete may start the model's code in a process of its
own): the repository runs it off the event loop. Nothing here builds an instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fpgaserve.backends import Backend, BackendError, backend_class
from fpgaserve.backends.hosting import ProcessBackend, hosted

from .. import model_config as mc
from ..errors import permission_denied
from . import config_support
from .auto_complete import auto_complete, detect_backend
from .model_files import available_versions, dir_signature, read_labels, select_versions
from .repoagents import RepositoryAgentError, run_load_agents

# a config parameter that runs any backend's instances in their own processes
INSTANCE_PROCESS_PARAMETER = "instance_process"


@dataclass
class ModelDefinition:
    """A model as a load builds it: ``backend`` is None for an ensemble (it has none)."""

    config: mc.ModelConfig
    backend: type[Backend] | None
    versions: list[int]
    signature: str  # of the model's folder, for poll mode
    labels: dict[str, list[str]]
    # what the config as written asks for that fpgaserve does not act on (config_support), or None
    warning: str | None


def read_model(
    name: str,
    model_dir: Path,
    config_json: str | None,
    *,
    model_config_name: str = "",
    uploaded: bool = False,
    allow_code_upload: bool = False,
    auto_complete_config: bool = True,
) -> ModelDefinition:
    """Model ``name`` from its folder ``model_dir`` (with ``config_json`` in place of its
    config file, a RepositoryModelLoad override). ``uploaded``: its files came with the load
    request, so a backend that runs them needs ``allow_code_upload``. Raises
    ``model_config.ConfigError`` naming the file and the problem, or PERMISSION_DENIED."""
    path = mc.config_path(model_dir, model_config_name)
    source = str(path)
    if config_json is not None:
        config = mc.parse_config_json(config_json)
        source = f"config override of '{name}'"
    else:
        config = mc.read_config_file(path)
    # named from the config as written: normalization sets fields of its own
    warning = config_support.load_warning(name, config)
    try:  # before anything reads the model's files (tritonserver runs them at poll)
        run_load_agents(config, model_dir)
    except RepositoryAgentError as e:
        raise mc.ConfigError(f"{source}: {e}") from None
    if mc.is_ensemble(config):
        mc.normalize(config, name)
        versions = select_versions(config, available_versions(model_dir), source)
        return _checked(name, model_dir, config, None, versions, source, warning)
    if not mc.backend_name(config):
        detect_backend(config, model_dir)
    try:
        cls = backend_class(mc.backend_name(config))
    except BackendError as e:
        raise mc.ConfigError(f"{source}: {e}") from None
    hosting = (mc.parameter(config, INSTANCE_PROCESS_PARAMETER, "") or "").lower()
    if hosting not in ("", "true", "false"):
        raise mc.ConfigError(
            f"{source}: parameter {INSTANCE_PROCESS_PARAMETER} is '{hosting}'; it takes true (each "
            "instance in a process of its own) or false (in the process of the server)"
        )
    if hosting == "true" and not issubclass(cls, ProcessBackend):
        cls = hosted(cls)  # each instance in its own process
    if uploaded and cls.executes_model_files and not allow_code_upload:
        raise permission_denied(
            f"failed to load '{name}': backend '{mc.backend_name(config)}' would run the code in the "
            "uploaded 'file:' parameters, which this server does not accept (start it with "
            "--allow-model-code-upload=true to allow it)",
        )
    mc.normalize(config, name, cls.default_filename)
    versions = select_versions(config, available_versions(model_dir), source)
    try:
        if auto_complete_config:
            auto_complete(config, cls, str(model_dir / str(versions[-1])))
    except BackendError as e:
        raise mc.ConfigError(f"{source}: {e}") from None
    return _checked(name, model_dir, config, cls, versions, source, warning)


def _checked(name: str, model_dir: Path, config, cls, versions: list[int], source: str, warning) -> ModelDefinition:
    # (no input or output is not an error: tritonserver loads such a config, e.g. the
    # override {"max_batch_size": 16} of a Python model that does not auto-complete,
    # and then refuses requests that name inputs the config does not declare)
    mc.validate(config, name, source)
    try:
        mc.validate_ensemble(config)
    except mc.ConfigError as e:
        raise mc.ConfigError(f"{source}: {e}") from None
    try:
        labels = read_labels(model_dir, config)
    except mc.ConfigError as e:
        raise mc.ConfigError(f"{source}: {e}") from None
    return ModelDefinition(config, cls, versions, dir_signature(model_dir), labels, warning)
