"""What a machine is: GPU specs (peaks, bandwidth, memory, links) and the probe that measures this one."""
