-- Resume a PipelineRollout or MonoVertexRollout: spec.<pipeline|monoVertex>.spec.lifecycle.desiredPhase = Running.
-- (Set spec.strategy.pauseResume.fastResume in Git to keep the replica counts.)
local templates = { PipelineRollout = "pipeline", MonoVertexRollout = "monoVertex" }
local field = templates[obj.kind]
local spec = obj.spec[field].spec
if spec.lifecycle == nil then
  spec.lifecycle = {}
end
spec.lifecycle.desiredPhase = "Running"
return obj
