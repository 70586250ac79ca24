"""Environment implementations; import them through the versioned modules
(``srpo_envs.math_v0``), which pin their behaviour."""
