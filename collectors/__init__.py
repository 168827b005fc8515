"""Node agents and the sources they read: NVML, host, jobs, simulated fleet, replay."""
