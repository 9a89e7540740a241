"""The post-install hook: activation scripts, pre-flight checks, and DeepSpeed ops built and proven."""
