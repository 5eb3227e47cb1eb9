"""Pure arithmetic: cache bytes, parameters, one rank's shard, one step's bytes/FLOPs/communication, ceilings."""
