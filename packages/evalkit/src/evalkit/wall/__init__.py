"""The wall: the one trust boundary both products run untrusted code behind.

A :class:`WallPolicy` is a short declarative jail (a read-only root of the interpreter and system libraries, a
private ``/job`` tmpfs, own pid, mount, IPC and network namespaces, a uid no other running job has, rlimits and a
seccomp filter); a :class:`Zygote` is a pre-started jailed interpreter that forks one process per job under that
policy; the tagged codec (:func:`tagged_encode` / :func:`tagged_decode`) is the only form in which data crosses, so
a value can never carry behaviour; and the :class:`Sandbox` is the pool of zygotes that runs a candidate's code
as one jailed job per test and turns whatever the job does into data (:class:`TestRun`). This subpackage is the
only code that touches namespaces, seccomp and uids. The grading stack (:mod:`evalkit.grading`) grades through the
:class:`Sandbox`; the PIT harness (:mod:`evalkit.pit`) runs each agent in a :class:`Zygote` of its own. Neither of
them is imported here: the wall knows nothing of tasks, verdicts, agents or releases.
"""

from typing import TYPE_CHECKING

from evalkit_core._lazy import lazy_exports

if TYPE_CHECKING:
    from evalkit.wall._codec import MAX_DEPTH, TaggedError, tagged_decode, tagged_encode, tagged_to_json
    from evalkit.wall._evidence import EVIDENCE, evidence_codes
    from evalkit.wall._hosterror import host_error
    from evalkit.wall._policy import (
        DEFAULT_DENY,
        Spawned,
        WallError,
        WallPolicy,
        WallReport,
        describe_status,
        refused_layers,
        release_uid_block,
        uid_block,
    )
    from evalkit.wall._sandbox import (
        JSON,
        Isolation,
        Sandbox,
        SandboxJob,
        SandboxLimits,
        SandboxRun,
        TestRun,
        open_sandbox,
        user_processes,
    )
    from evalkit.wall._zygote import Zygote, default_workers, launch_early

# Lazy, like the package above: the CLI launches the zygotes early (``launch_early``) before it imports the rest.
_LAZY: dict[str, str] = {
    "DEFAULT_DENY": "evalkit.wall._policy",
    "EVIDENCE": "evalkit.wall._evidence",
    "JSON": "evalkit.wall._sandbox",
    "MAX_DEPTH": "evalkit.wall._codec",
    "Isolation": "evalkit.wall._sandbox",
    "Sandbox": "evalkit.wall._sandbox",
    "SandboxJob": "evalkit.wall._sandbox",
    "SandboxLimits": "evalkit.wall._sandbox",
    "SandboxRun": "evalkit.wall._sandbox",
    "Spawned": "evalkit.wall._policy",
    "TaggedError": "evalkit.wall._codec",
    "TestRun": "evalkit.wall._sandbox",
    "WallError": "evalkit.wall._policy",
    "WallPolicy": "evalkit.wall._policy",
    "WallReport": "evalkit.wall._policy",
    "Zygote": "evalkit.wall._zygote",
    "default_workers": "evalkit.wall._zygote",
    "describe_status": "evalkit.wall._policy",
    "evidence_codes": "evalkit.wall._evidence",
    "host_error": "evalkit.wall._hosterror",
    "launch_early": "evalkit.wall._zygote",
    "open_sandbox": "evalkit.wall._sandbox",
    "refused_layers": "evalkit.wall._policy",
    "release_uid_block": "evalkit.wall._policy",
    "tagged_decode": "evalkit.wall._codec",
    "tagged_encode": "evalkit.wall._codec",
    "tagged_to_json": "evalkit.wall._codec",
    "uid_block": "evalkit.wall._policy",
    "user_processes": "evalkit.wall._sandbox",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "DEFAULT_DENY",
    "EVIDENCE",
    "JSON",
    "MAX_DEPTH",
    "Isolation",
    "Sandbox",
    "SandboxJob",
    "SandboxLimits",
    "SandboxRun",
    "Spawned",
    "TaggedError",
    "TestRun",
    "WallError",
    "WallPolicy",
    "WallReport",
    "Zygote",
    "default_workers",
    "describe_status",
    "evidence_codes",
    "host_error",
    "launch_early",
    "open_sandbox",
    "refused_layers",
    "release_uid_block",
    "tagged_decode",
    "tagged_encode",
    "tagged_to_json",
    "uid_block",
    "user_processes",
]
