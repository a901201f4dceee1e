"""Differentiable articulated-body dynamics, batched over particles (PyTorch).

Why hand-written: MuJoCo, Pinocchio and PyBullet compute the same forward dynamics on
CPU, but none of them gives gradients of a whole rollout with respect to masses,
inertias, damping and contact parameters while running many parameter sets
("particles") at once in one batch. This package does, in PyTorch, so that
``loss.backward()`` through ``rollout`` reaches every parameter tensor. The engines
above are the references it is tested against (``tests/test_dynamics*.py``).

It deliberately does not do: meshes or collision between bodies (only sampled contact
points against a ground plane and a moving cylindrical tip), constraint-based
(impulse/NCP) contact, closed kinematic loops, joint limits.

Speed (``scripts/bench_simulate.py``, 64 particles x 200 steps, value + gradient wrt
per-particle masses and dampings, float64, one CPU thread): eager PyTorch is limited by
the per-op overhead (~1000 small ops per step forward and backward); ``rollout(...,
compile=True)`` fuses a step into a few forward and backward C++ kernels and runs the
rest of the rollout through them in one C loop (``kernels.py``, ``native.py``), the
backward as one reverse loop over the steps' backward kernels: ~30x faster than eager,
at the price of a cold compile of ~12 CPU s, once per model structure and machine (the
compiled step is kept on disk, ``stepcache.py``: ~2 CPU s for a later process's first
call). See the bench's JSON for the figures against MuJoCo's ``rollout`` + central
differences.

Conventions (SI units throughout: m, kg, s, N, N m, rad)
---------------------------------------------------------
- World z points up; default gravity ``(0, 0, -9.81)`` m/s^2.
- A model is a kinematic tree of N bodies in topological order (parents before
  children). Body i is the child of joint i; ``parents[i]`` is the parent body index,
  -1 for the world. Every body has exactly one joint; a joint's frame is given by its
  fixed pose in the parent body frame (URDF ``<origin>``); at q = 0 the child body frame
  coincides with the joint frame (exactly URDF semantics).
- Spatial vectors inside the algorithms follow Featherstone ([angular; linear]),
  "Rigid Body Dynamics Algorithms" (2008): ABA Table 7.1, RNEA Table 5.1, CRBA Table 6.2.
- Joint types and their slices of q (positions, ``nq`` wide) and qd (generalized
  velocities, ``nv`` wide); qd is the velocity of the child *in the child frame*:

  ============  ====  ====  =========================================================
  type          nq    nv    q                    qd
  ============  ====  ====  =========================================================
  revolute      1     1     angle about axis     dq/dt
  prismatic     1     1     slide along axis     dq/dt
  fixed         0     0     -                    -
  planar        3     3     x, y, theta          vx, vy (child frame), omega
  free          7     6     x, y, z, qx, qy, qz, qw  v (child origin, child frame),
                                                      omega (child frame)
  ============  ====  ====  =========================================================

  The free-joint layout (position + unit quaternion **xyzw**, velocities linear then
  angular, both in the child frame) is Pinocchio's ``JointModelFreeFlyer`` and matches
  ``joint_positions.npz``'s ``root_pose`` (x, y, z, qx, qy, qz, qw). A planar joint
  moves in the plane orthogonal to its axis n (translation along t1, t2 with
  (t1, t2, n) right-handed, t1 = the joint-frame x axis projected into the plane, or y
  if x is parallel to n), then rotates about n; with n = z it is Pinocchio's
  ``JointModelPlanar`` with q = (x, y, theta) instead of (x, y, cos, sin).
- "Joint parameters" (damping, friction, stiffness, rest) are per velocity dof,
  shape (B, nv). Spring force is ``-stiffness * (q - rest)`` on revolute, prismatic and
  planar dofs (free-joint dofs ignore stiffness); damping ``-damping * qd``; Coulomb
  friction smoothed ``-friction * tanh(qd / friction_velocity)``.

Public API
----------
``Model``       the tree (static Python topology) plus parameter tensors, batch B:
                ``mass`` (B, N) kg; ``com`` (B, N, 3) m, body frame; ``inertia``
                (B, N, 3, 3) kg m^2 about the COM, body axes; ``damping``,
                ``friction``, ``stiffness``, ``rest`` (B, nv); ``gravity`` (B, 3);
                ``contact_stiffness`` (B,) N/m, ``contact_damping`` (B,) s/m
                (Hunt–Crossley: f_n = k*depth*(1 + d*depth_rate)), ``contact_friction``
                (B,) Coulomb mu. Geometry (not batched): ``joint_axis`` (N, 3) joint
                frame; ``joint_rotation`` (N, 3, 3), ``joint_translation`` (N, 3): the
                joint frame in the parent body frame; ``contact_body`` (P,) long,
                ``contact_points`` (P, 3) in body frames; ``ground`` (bool),
                ``ground_height``; ``tip_radius``, ``tip_half_length`` (cylinder with
                world axis ``tip_axis``), ``tip_friction`` (B,) its Coulomb mu with the
                parts or None (then ``contact_friction``). ``nets``: neural augmentations (below).
                Names: ``body_names``, ``joint_names``, ``joint_types``, ``parents``,
                ``nq``, ``nv``, ``batch``, ``q_slice(joint)``, ``v_slice(joint)``,
                ``dof_names`` (nv names "joint" or "joint/k").
                ``model.param_names()`` lists scalar parameter names ("<body>.mass",
                "<body>.com_x|y|z", "<body>.ixx|iyy|izz|ixy|ixz|iyz",
                "<joint>.damping|friction|stiffness|rest", "gravity_z",
                "contact.stiffness|damping|friction"); ``model.get(name)`` -> (B,);
                ``model.with_params({name: (B,) tensor})`` -> new Model (differentiable);
                ``model.expand(B)``, ``model.to(dtype)``, ``model.replace(**fields)``.
``State``       ``q`` (B, nq), ``qd`` (B, nv). ``model.zero_state()``.
``Control``     ``tau`` (B, nv) generalized force (N or N m) or None; ``tip_pos``,
                ``tip_vel`` (B, 3) world position/velocity of the tip axis' centre, or
                None (no tip).
``step(model, state, control=None, dt=1e-3, integrator="euler", algorithm="jsim") -> State``
                semi-implicit Euler (qd += dt*qdd; q += dt*qdot(q, qd_new)) or "rk4".
                algorithm: "jsim" (joint-space inertia method vectorised over bodies,
                ``fast.py``; default, fewest tensor ops for small trees) or "aba"
                (Featherstone's ABA, ``algorithms.py``); both agree to round-off.
``rollout(model, state0, steps, dt=1e-3, controls=None, integrator="euler",
          compile=False, algorithm="jsim") -> State``
                q (steps+1, B, nq), qd (steps+1, B, nv); index 0 is ``state0``.
                ``controls``: None, a Control whose tensors have a leading time
                dimension (steps, B, ...), or a callable ``(k, state) -> Control``.
                ``compile=True`` compiles one step with ``torch.compile`` and replays its
                kernels for every later step: about 3-10x faster per step than eager for
                value+gradient, but the first call compiles (~15 s quiet, tens of seconds
                on a loaded 2-core machine; Inductor caches the kernels, ~6-10 s warm). Each new model structure / batch size / dtype
                compiles again (Dynamo's recompile limit applies).
``forward_dynamics(model, q, qd, tau=None, f_ext=None) -> qdd`` (B, nv): ABA of the
                rigid tree under gravity with generalized force ``tau`` (B, nv) and
                ``f_ext`` (B, N, 6) spatial forces [torque; force] in body frames about
                body origins; no joint, contact or augmentation forces.
``accelerations(model, state, control=None) -> qdd`` (B, nv): what ``step``
                integrates: ABA with joint forces (spring, damping, friction), contact
                and neural augmentation added.
``inverse_dynamics(model, q, qd, qdd) -> tau`` (B, nv): RNEA (gravity, no joint
                forces, no contact).
``mass_matrix(model, q) -> M`` (B, nv, nv): CRBA.
``forward_kinematics(model, q) -> T_world_body`` (B, N, 4, 4).
``model_from_urdf(path_or_string, batch=1, dtype=torch.float64, floating=None,
                  contact_points=0) -> Model``: a root link named "world" (or
                ``floating=False``) is the fixed base; otherwise the root link gets a
                free joint named "<root>_free". ``contact_points`` > 0 samples about
                that many points per collision shape.
``model_to_urdf(model, particle=0, name="vid2sim") -> str``.
``mjcf.model_to_mjcf(model, particle=0, dt, integrator)``, ``mjcf.to_mujoco_state``: the
                same tree for MuJoCo (tests and ``scripts/bench_simulate.py``).
``model_from_articulation(art, T_world_body0, masses=None, shapes=None, batch=1,
                          dtype=torch.float64) -> Model``: from the articulate stage.
                Joint frames sit at the joint pivot with world axes at frame 0, body
                frame = joint frame, so q = 0 is the frame-0 configuration.
``NeuralAugmentation`` / ``add_augmentation(model, point, inputs, hidden=5,
                layers=2, seed=0) -> Model``: insertion points ``"joint_force"``
                (output (B, nv) added to generalized force) and ``"contact_friction"``
                (scalar per contact point added to the friction magnitude); inputs by
                name: "q/<dof>", "qd/<dof>" (dof names as ``model.dof_names``),
                and for contact "contact/depth", "contact/rate", "contact/normal_force",
                "contact/slip". MLP: ELU, hidden x layers. ``augmentation_penalty(model,
                lasso=..., l2=...)``: sparse group lasso on input weights (one group
                per input) + L2 on the rest; ``group_lasso_prox(model, step)`` (proximal
                step after each optimiser step; ``adam_group_lasso_step(net, adam, lr,
                lasso)`` gives the per-input step for Adam).
"""
from .spatial import quat_to_rot, rot_to_quat, rpy_to_rot, axis_angle_to_rot  # noqa: F401
from .model import Model, State, Control, JOINT_NQ, JOINT_NV  # noqa: F401
from .algorithms import forward_dynamics, inverse_dynamics, mass_matrix, forward_kinematics  # noqa: F401
from .integrate import step, rollout, qdot, integrate_q, accelerations  # noqa: F401
from .augment import (NeuralAugmentation, add_augmentation, adam_group_lasso_step, augmentation_penalty,  # noqa: F401
                      group_lasso_prox)
from .urdf import model_from_urdf, model_to_urdf, model_from_articulation  # noqa: F401

__all__ = [
    "Model", "State", "Control", "step", "rollout", "forward_dynamics", "inverse_dynamics",
    "mass_matrix", "forward_kinematics", "model_from_urdf", "model_to_urdf",
    "model_from_articulation", "NeuralAugmentation", "add_augmentation",
    "augmentation_penalty", "group_lasso_prox", "adam_group_lasso_step", "qdot", "integrate_q", "accelerations",
]
