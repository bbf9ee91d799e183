"""Services under test: the ZooKeeper ensemble, the brokers, and the cluster of both."""

from harness.db.brokers import BrokerSet
from harness.db.cluster import Cluster, ClusterSpec, down, recorded_clusters
from harness.db.zookeeper import ZooKeeperEnsemble, ZooKeeperSettings

__all__ = ["BrokerSet", "Cluster", "ClusterSpec", "ZooKeeperEnsemble", "ZooKeeperSettings", "down",
           "recorded_clusters"]
