-- Delete this recyclable pipeline now instead of draining it first (annotation numaplane.numaproj.io/marked-for-deletion).
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["numaplane.numaproj.io/marked-for-deletion"] = "true"
return obj
