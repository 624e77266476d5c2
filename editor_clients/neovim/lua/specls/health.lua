-- :checkhealth specls
local M = {}

-- vim.health.start/ok/... on 0.10+, vim.health.report_* on 0.8-0.9, require('health').report_* on 0.7.
local health = vim.health or require('health')
local report = {
  start = health.start or health.report_start,
  ok = health.ok or health.report_ok,
  warn = health.warn or health.report_warn,
  error = health.error or health.report_error,
  info = health.info or health.report_info,
}

--- :checkhealth specls
function M.check()
  report.start('specls')
  if vim.fn.has('nvim-0.7') == 1 then
    report.ok('Neovim ' .. tostring(vim.version().major) .. '.' .. tostring(vim.version().minor))
  else
    report.error('Neovim 0.7 or newer is required')
  end
  local specls = package.loaded['specls']
  local config = specls and specls.config
  if not config then
    report.warn('setup() has not run', { "Add require('specls').setup{} to your init.lua" })
    return
  end
  local exe = config.cmd[1]
  if vim.fn.executable(exe) == 1 then
    report.ok(('server command found: %s'):format(vim.fn.exepath(exe)))
  else
    report.error(('server command not found: %s'):format(exe), {
      'Install the server: pip install specls',
      'Or point setup{ cmd = { "/path/to/specls", "serve" } } at it',
    })
  end
  local builtin = require('specls.config').builtin_enabled(config)
  report.info(
    builtin and 'ghost text: vim.lsp.inline_completion (built in)' or 'ghost text: drawn by specls (extmarks)'
  )
  if require('specls.completion').use_completion then
    report.warn('the server did not answer textDocument/inlineCompletion; using textDocument/completion')
  end
  local server = require('specls.server')
  local status = server.status or {}
  local line = ('server: %s%s'):format(
    status.state or 'unknown',
    status.message and status.message ~= '' and (' (' .. status.message .. ')') or ''
  )
  if status.state == 'ready' then
    report.ok(line .. (status.model and (', model ' .. status.model) or ''))
  elseif status.state == 'error' then
    report.error(line, { 'Check the model settings, then :SpeclsRestart' })
  else
    report.info(line)
  end
end

return M
