"""Joint models for the articulate stage: fitting, model selection, forward kinematics.

- ``fit``: fixed / prismatic / revolute / planar models of a relative pose sequence,
  RANSAC + least squares + BIC-like selection (Heiden et al. 2022, Alg. 6;
  Sturm et al. 2011).
- ``points``: revolute vs prismatic from the 3-D track of one point (circle vs line).
- ``kinematics``: the joint-coordinate convention, ``forward_kinematics`` and the
  URDF frames that realise it (read its docstring before exporting a URDF).
- ``evaluate``: comparison of an articulation with ground truth (tests, benchmark).
"""
from vid2sim.models.joints.kinematics import coordinate_names, forward_kinematics, joint_motion, urdf_frames

__all__ = ["coordinate_names", "forward_kinematics", "joint_motion", "urdf_frames"]
