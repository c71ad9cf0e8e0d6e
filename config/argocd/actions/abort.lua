-- End this trial's progressive upgrade now as a failure (label numaplane.numaproj.io/abort): it is
-- scaled to zero like a failed trial, the promoted child gets its scale back, and the rollout stays
-- on the promoted child until its spec changes again. Force Promote still wins over it.
if obj.metadata.labels == nil then
  obj.metadata.labels = {}
end
obj.metadata.labels["numaplane.numaproj.io/abort"] = "true"
return obj
