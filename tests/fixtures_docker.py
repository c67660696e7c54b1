"""Real Docker engine, local registry and locally made base images (filled in by the images work)."""
