-- Re-run this failed (or aborted) trial's progressive upgrade without a spec edit (label
-- numaplane.numaproj.io/retry): the controller replaces it by a new trial of the same spec,
-- assessed from the start; this one is drained and deleted like any replaced trial.
if obj.metadata.labels == nil then
  obj.metadata.labels = {}
end
obj.metadata.labels["numaplane.numaproj.io/retry"] = "true"
return obj
