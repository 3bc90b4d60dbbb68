"""GPU catalog (``gpus.json``), interconnect catalog (``links.json``) and cluster specs, each row with its
source. Light to import: no torch; PyYAML only when a ``.yaml`` cluster file is read."""

from trainmem.hardware.catalog import GPU, get_gpu, list_gpus
from trainmem.hardware.cluster import Cluster, GPUGroup, Link, parse_cluster
from trainmem.hardware.links import get_link, list_links

__all__ = ["GPU", "get_gpu", "list_gpus", "Cluster", "GPUGroup", "Link", "parse_cluster", "get_link", "list_links"]
