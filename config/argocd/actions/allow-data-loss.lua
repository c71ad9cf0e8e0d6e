-- Let pause-and-drain updates of a PipelineRollout proceed without waiting for the pipeline to pause.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["numaplane.numaproj.io/allow-data-loss"] = "true"
return obj
