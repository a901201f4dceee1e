"""Model (tree + parameters), State and Control (warp.sim's split).

The Model holds what does not change during a rollout: the tree topology as plain
Python (so loops over bodies unroll once, also under ``torch.compile``), the joint
geometry, and the parameters as tensors with a leading particle dimension B. Replace
parameters with ``with_params``/``replace``; never mutate a Model in place.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

JOINT_NQ = {"revolute": 1, "prismatic": 1, "fixed": 0, "planar": 3, "free": 7}
JOINT_NV = {"revolute": 1, "prismatic": 1, "fixed": 0, "planar": 3, "free": 6}

_INERTIA_KEYS = {"ixx": (0, 0), "iyy": (1, 1), "izz": (2, 2), "ixy": (0, 1), "ixz": (0, 2), "iyz": (1, 2)}
_JOINT_PARAMS = ("damping", "friction", "stiffness", "rest")
_CONTACT_PARAMS = ("stiffness", "damping", "friction")
BATCHED_FIELDS = ("mass", "com", "inertia", "damping", "friction", "stiffness", "rest", "gravity",
                  "contact_stiffness", "contact_damping", "contact_friction")


@dataclass(frozen=True)
class State:
    """q: (B, nq) joint positions; qd: (B, nv) generalized velocities (see package docstring)."""

    q: torch.Tensor
    qd: torch.Tensor


@dataclass(frozen=True)
class Control:
    """tau: (B, nv) generalized force or None; tip_pos, tip_vel: (B, 3) world, or None."""

    tau: torch.Tensor | None = None
    tip_pos: torch.Tensor | None = None
    tip_vel: torch.Tensor | None = None

    def at(self, k: int) -> "Control":
        """The k-th entry of a Control whose tensors have a leading time dimension."""
        return Control(*(None if t is None else t[k] for t in (self.tau, self.tip_pos, self.tip_vel)))


@dataclass(frozen=True)
class Model:
    """A kinematic tree with batched parameters. See the package docstring for fields."""

    body_names: tuple[str, ...]
    joint_names: tuple[str, ...]
    joint_types: tuple[str, ...]
    parents: tuple[int, ...]
    joint_axis: torch.Tensor          # (N, 3) joint frame
    joint_rotation: torch.Tensor      # (N, 3, 3) joint frame -> parent body frame
    joint_translation: torch.Tensor   # (N, 3) joint frame origin in parent body frame
    mass: torch.Tensor                # (B, N)
    com: torch.Tensor                 # (B, N, 3)
    inertia: torch.Tensor             # (B, N, 3, 3) about COM
    damping: torch.Tensor             # (B, nv)
    friction: torch.Tensor            # (B, nv)
    stiffness: torch.Tensor           # (B, nv)
    rest: torch.Tensor                # (B, nv)
    gravity: torch.Tensor             # (B, 3)
    contact_stiffness: torch.Tensor   # (B,)
    contact_damping: torch.Tensor     # (B,)
    contact_friction: torch.Tensor    # (B,)
    contact_body: tuple[int, ...] = ()
    contact_points: torch.Tensor | None = None  # (P, 3) body frames
    ground: bool = False
    ground_height: float = 0.0
    tip_radius: float = 0.0
    tip_half_length: float = float("inf")
    tip_axis: tuple[float, float, float] = (0.0, 0.0, 1.0)
    tip_friction: torch.Tensor | None = None  # (B,) Coulomb mu between the tip and the parts; None: contact_friction
    friction_velocity: float = 1e-2   # joint Coulomb smoothing (rad/s or m/s)
    slip_velocity: float = 1e-2       # contact friction smoothing (m/s)
    nets: tuple = ()                  # NeuralAugmentation instances
    body_shapes: tuple = ()           # optional (name, type, dims) per body for URDF export
    _offsets: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        n = len(self.body_names)
        if not (len(self.joint_names) == len(self.joint_types) == len(self.parents) == n):
            raise ValueError("body_names, joint_names, joint_types, parents must have one entry per body")
        for i, (t, p) in enumerate(zip(self.joint_types, self.parents)):
            if t not in JOINT_NQ:
                raise ValueError(f"joint {self.joint_names[i]!r}: unknown type {t!r}")
            if not -1 <= p < i:
                raise ValueError(f"body {self.body_names[i]!r}: parent index {p} must precede it (topological order)")
        qo, vo = [0], [0]
        for t in self.joint_types:
            qo.append(qo[-1] + JOINT_NQ[t])
            vo.append(vo[-1] + JOINT_NV[t])
        object.__setattr__(self, "_offsets", (tuple(qo), tuple(vo)))
        B = self.mass.shape[0]
        nv = vo[-1]
        shapes = {"mass": (B, n), "com": (B, n, 3), "inertia": (B, n, 3, 3), "damping": (B, nv),
                  "friction": (B, nv), "stiffness": (B, nv), "rest": (B, nv), "gravity": (B, 3),
                  "contact_stiffness": (B,), "contact_damping": (B,), "contact_friction": (B,)}
        for k, s in shapes.items():
            if tuple(getattr(self, k).shape) != s:
                raise ValueError(f"Model.{k}: shape {tuple(getattr(self, k).shape)}, expected {s}")

    # --- sizes and names -------------------------------------------------------------
    @property
    def num_bodies(self) -> int:
        return len(self.body_names)

    @property
    def batch(self) -> int:
        return self.mass.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.mass.dtype

    @property
    def nq(self) -> int:
        return self._offsets[0][-1]

    @property
    def nv(self) -> int:
        return self._offsets[1][-1]

    def q_slice(self, joint: int | str) -> slice:
        i = joint if isinstance(joint, int) else self.joint_names.index(joint)
        return slice(self._offsets[0][i], self._offsets[0][i + 1])

    def v_slice(self, joint: int | str) -> slice:
        i = joint if isinstance(joint, int) else self.joint_names.index(joint)
        return slice(self._offsets[1][i], self._offsets[1][i + 1])

    @property
    def dof_names(self) -> tuple[str, ...]:
        """nv names: the joint name for 1-dof joints, "joint/k" for the k-th dof of others."""
        out = []
        for name, t in zip(self.joint_names, self.joint_types):
            nv = JOINT_NV[t]
            out += [name] if nv == 1 else [f"{name}/{k}" for k in range(nv)]
        return tuple(out)

    @property
    def spring_mask(self) -> tuple[bool, ...]:
        """(nv,) which dofs the joint spring acts on (all but free-joint dofs)."""
        return tuple(t != "free" for t in self.joint_types for _ in range(JOINT_NV[t]))

    @property
    def spring_index(self) -> tuple[int, ...]:
        """(nv,) the q index each dof's spring acts on (0 for free-joint dofs, masked out)."""
        idx = []
        for i, t in enumerate(self.joint_types):
            qs = self.q_slice(i).start
            idx += [0] * 6 if t == "free" else [qs + k for k in range(JOINT_NV[t])]
        return tuple(idx)

    # --- parameters by name --------------------------------------------------------------
    def param_names(self) -> list[str]:
        names = []
        for b in self.body_names:
            names += [f"{b}.mass"] + [f"{b}.com_{c}" for c in "xyz"] + [f"{b}.{k}" for k in _INERTIA_KEYS]
        for j, t in zip(self.joint_names, self.joint_types):
            if JOINT_NV[t]:
                names += [f"{j}.{k}" for k in _JOINT_PARAMS]
        names += ["gravity_z"] + [f"contact.{k}" for k in _CONTACT_PARAMS]
        return names

    def _locate(self, name: str):
        """-> (field, index tuple into the field after the batch dim, or list of such)."""
        if name == "gravity_z":
            return "gravity", [(2,)]
        owner, _, key = name.rpartition(".")
        if owner == "contact" and key in _CONTACT_PARAMS:
            return f"contact_{key}", [()]
        if owner in self.body_names:
            i = self.body_names.index(owner)
            if key == "mass":
                return "mass", [(i,)]
            if key.startswith("com_") and key[4:] in ("x", "y", "z"):
                return "com", [(i, "xyz".index(key[4:]))]
            if key in _INERTIA_KEYS:
                r, c = _INERTIA_KEYS[key]
                return "inertia", [(i, r, c)] if r == c else [(i, r, c), (i, c, r)]
        if owner in self.joint_names and key in _JOINT_PARAMS:
            s = self.v_slice(owner)
            return key, [(k,) for k in range(s.start, s.stop)]
        raise KeyError(f"unknown parameter {name!r}; see Model.param_names()")

    def get(self, name: str) -> torch.Tensor:
        """(B,) value of a named scalar parameter (first dof for multi-dof joints)."""
        f, idx = self._locate(name)
        t = getattr(self, f)
        return t[(slice(None),) + idx[0]]

    def with_params(self, values: dict[str, torch.Tensor | float]) -> "Model":
        """New Model with named scalars replaced by (B,) tensors (or floats); differentiable."""
        new = {}
        for name, v in values.items():
            f, idxs = self._locate(name)
            t = new.get(f, getattr(self, f)).clone()
            v = torch.as_tensor(v, dtype=t.dtype, device=t.device).expand(t.shape[0])
            for idx in idxs:
                t[(slice(None),) + idx] = v
            new[f] = t
        return dataclasses.replace(self, **new)

    def replace(self, **fields) -> "Model":
        return dataclasses.replace(self, **fields)

    def expand(self, batch: int) -> "Model":
        """Repeat a batch-1 model to ``batch`` particles (differentiable, memory-shared)."""
        if self.batch == batch:
            return self
        if self.batch != 1:
            raise ValueError(f"expand: model has batch {self.batch}, only 1 can be expanded")
        new = {k: getattr(self, k).expand((batch,) + tuple(getattr(self, k).shape[1:])) for k in self._batched()}
        return dataclasses.replace(self, **new)

    def _batched(self) -> tuple[str, ...]:
        """The batched tensor fields present (``tip_friction`` is optional)."""
        return BATCHED_FIELDS + (("tip_friction",) if self.tip_friction is not None else ())

    def select(self, rows) -> "Model":
        """The particles ``rows`` (index, slice or index tensor) as a new Model."""
        if isinstance(rows, int):
            rows = slice(rows, rows + 1)
        new = {k: getattr(self, k)[rows] for k in self._batched()}
        nets = tuple(n.select(rows) for n in self.nets)
        return dataclasses.replace(self, nets=nets, **new)

    def to(self, dtype: torch.dtype) -> "Model":
        new = {k: getattr(self, k).to(dtype) for k in self._batched() + ("joint_axis", "joint_rotation", "joint_translation")}
        if self.contact_points is not None:
            new["contact_points"] = self.contact_points.to(dtype)
        return dataclasses.replace(self, nets=tuple(n.to(dtype) for n in self.nets), **new)

    def zero_state(self) -> State:
        """q = 0 with identity quaternions for free joints, qd = 0."""
        q = torch.zeros(self.batch, self.nq, dtype=self.dtype)
        for i, t in enumerate(self.joint_types):
            if t == "free":
                q[:, self.q_slice(i).start + 6] = 1.0
        return State(q, torch.zeros(self.batch, self.nv, dtype=self.dtype))


def make_model(body_names, joint_names, joint_types, parents, joint_axis, joint_rotation, joint_translation,
               mass, com, inertia, *, batch: int = 1, dtype=torch.float64, damping=None, friction=None,
               stiffness=None, rest=None, gravity=(0.0, 0.0, -9.81), contact_stiffness=1e4,
               contact_damping=1.0, contact_friction=0.5, **extra) -> Model:
    """Build a Model from per-body lists/arrays (unbatched parameters are repeated to B)."""
    n = len(body_names)
    nv = sum(JOINT_NV[t] for t in joint_types)

    def T(x, shape):
        t = torch.as_tensor(x, dtype=dtype)
        if tuple(t.shape) == shape[1:]:
            t = t.unsqueeze(0).expand(shape)
        return t.expand(shape).clone()

    zeros = [0.0] * nv
    return Model(
        tuple(body_names), tuple(joint_names), tuple(joint_types), tuple(int(p) for p in parents),
        torch.as_tensor(joint_axis, dtype=dtype).reshape(n, 3), torch.as_tensor(joint_rotation, dtype=dtype).reshape(n, 3, 3),
        torch.as_tensor(joint_translation, dtype=dtype).reshape(n, 3),
        T(mass, (batch, n)), T(com, (batch, n, 3)), T(inertia, (batch, n, 3, 3)),
        T(zeros if damping is None else damping, (batch, nv)), T(zeros if friction is None else friction, (batch, nv)),
        T(zeros if stiffness is None else stiffness, (batch, nv)), T(zeros if rest is None else rest, (batch, nv)),
        T(gravity, (batch, 3)), T(contact_stiffness, (batch,)), T(contact_damping, (batch,)),
        T(contact_friction, (batch,)), **extra)
