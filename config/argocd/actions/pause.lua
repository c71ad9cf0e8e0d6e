-- Pause a PipelineRollout or MonoVertexRollout: spec.<pipeline|monoVertex>.spec.lifecycle.desiredPhase = Paused.
local templates = { PipelineRollout = "pipeline", MonoVertexRollout = "monoVertex" }
local field = templates[obj.kind]
local spec = obj.spec[field].spec
if spec.lifecycle == nil then
  spec.lifecycle = {}
end
spec.lifecycle.desiredPhase = "Paused"
return obj
