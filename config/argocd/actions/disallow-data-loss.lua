-- Remove the allow-data-loss annotation of a PipelineRollout: pause-and-drain waits for Paused again.
if obj.metadata.annotations ~= nil then
  obj.metadata.annotations["numaplane.numaproj.io/allow-data-loss"] = nil
end
return obj
