"""Tests never touch the network: the Hugging Face hub is offline for the whole session (a hub id outside the
catalog reads only the hub cache; tests/model/test_hub.py replaces the download where it tests the fetch)."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
