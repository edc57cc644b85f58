"""Pulumi components of autoclusters, one ``ComponentResource`` per module.

Every Kubernetes object they create comes from the dict builders in
``autoclusters.deploy``; the components only parent, order and wire them.
"""

from components.admission_policy import AdmissionPolicy, AdmissionPolicyArgs
from components.autoclusters import AutoClusters, AutoClustersArgs
from components.controller import Controller, ControllerArgs
from components.crds import Crds, CrdsArgs
from components.detector import Detector, DetectorArgs
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.rbac import Rbac, RbacArgs

__all__ = [
    "AdmissionPolicy", "AdmissionPolicyArgs", "AutoClusters", "AutoClustersArgs", "Controller", "ControllerArgs",
    "Crds", "CrdsArgs", "Detector", "DetectorArgs", "GpuNodePool", "GpuNodePoolArgs", "Rbac", "RbacArgs",
]
