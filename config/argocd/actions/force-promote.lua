-- Promote this trial child now, even after a failed assessment (label numaplane.numaproj.io/force-promote).
if obj.metadata.labels == nil then
  obj.metadata.labels = {}
end
obj.metadata.labels["numaplane.numaproj.io/force-promote"] = "true"
return obj
