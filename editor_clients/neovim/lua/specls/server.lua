-- Starting, attaching and restarting the specls language server; keeps the last specls/status.
---@class specls.Status
---@field state 'stopped'|'loading'|'ready'|'error'|string
---@field message string
local M = {
  client_id = nil,
  status = { state = 'stopped', message = 'not started' },
  ---@type fun()?
  on_ready = nil,
  ---@type fun(uri: string, suggestion_id: string)?
  on_grown = nil,
}

local lsp_config -- built by M.configure from the plugin config
local on_attach_hooks = {}

---@return lsp.ClientCapabilities
local function capabilities()
  local caps = vim.lsp.protocol.make_client_capabilities()
  -- Older clients do not announce inline completion; the plugin implements it itself, so say so.
  caps.textDocument.inlineCompletion = caps.textDocument.inlineCompletion or { dynamicRegistration = false }
  -- Neovim before 0.10 counts columns in UTF-16 and does not say so; say it, so no server has to guess.
  caps.general = caps.general or {}
  caps.general.positionEncodings = caps.general.positionEncodings or { 'utf-16' }
  -- The plugin asks again when told that a suggestion answered in part is whole (specls/suggestionGrown),
  -- so the server may answer mid-line with what it has so far.
  caps.experimental = vim.tbl_extend('force', caps.experimental or {}, { speclsSuggestionGrown = true })
  return caps
end

---@param params specls.Status
local function on_status(_, params)
  if type(params) == 'table' then
    local was_ready = M.status.state == 'ready'
    M.status = params
    if params.state == 'ready' and not was_ready and M.on_ready then
      vim.schedule(M.on_ready) -- e.g. tell the server where the cursor is, so it warms its cache there
    end
  end
end

local tcp -- the plugin's `tcp` option, when it connects instead of starting a server

--- The default token file of `specls serve --tcp --port PORT` (lsp_server/auth.py).
---@param port integer
---@return string
function M.default_token_file(port)
  local runtime = os.getenv('XDG_RUNTIME_DIR')
  if runtime and runtime ~= '' and vim.fn.isdirectory(runtime) == 1 then
    return ('%s/specls/tcp-%d.token'):format(runtime, port)
  end
  local cache = os.getenv('SPECLS_CACHE_DIR')
  cache = (cache and cache ~= '') and vim.fn.expand(cache) or (vim.fn.expand('~') .. '/.cache/specls')
  return ('%s/tcp-%d.token'):format(cache, port)
end

--- The server's token, read when connecting (the server writes it when it starts).
---@param options specls.Tcp
---@return string? token
---@return string? error
function M.read_token(options)
  local path = options.token_file or M.default_token_file(options.port)
  local file = io.open(path, 'r')
  if not file then
    return nil, 'cannot read the token file ' .. path .. ' (is `specls serve --tcp` running?)'
  end
  local token = vim.trim(file:read('*a') or '')
  file:close()
  if token == '' then
    return nil, 'the token file ' .. path .. ' is empty'
  end
  return token, nil
end

--- Remember how to start the server; `hook(client, bufnr)` runs on every attach.
---@param config specls.Config
---@param hook fun(client: vim.lsp.Client, bufnr: integer)
function M.configure(config, hook)
  on_attach_hooks = { hook }
  tcp = config.tcp
  lsp_config = {
    name = 'specls',
    cmd = config.cmd,
    root_dir = vim.fn.getcwd(),
    -- An empty Lua table encodes as a JSON array; initializationOptions must be an object.
    init_options = next(config.settings) == nil and vim.empty_dict() or config.settings,
    capabilities = capabilities(),
    -- Send each edit at once: a suggestion is only as fresh as the text the server has.
    flags = { debounce_text_changes = 0 },
    handlers = {
      ['specls/status'] = on_status,
      ['specls/suggestionGrown'] = function(_, params)
        if M.on_grown and type(params) == 'table' and type(params.uri) == 'string' then
          M.on_grown(params.uri, tostring(params.suggestionId))
        end
      end,
    },
    on_attach = function(client, bufnr)
      for _, hook_fn in ipairs(on_attach_hooks) do
        hook_fn(client, bufnr)
      end
    end,
    on_exit = function(code, signal)
      M.client_id = nil
      M.status = { state = 'stopped', message = ('server exited (code %s, signal %s)'):format(code, signal) }
    end,
  }
end

---@return vim.lsp.Client?
function M.client()
  return M.client_id and vim.lsp.get_client_by_id(M.client_id) or nil
end

--- Attach `bufnr` to the server, starting it first if needed.
---@param bufnr integer
---@return integer? client_id
function M.attach(bufnr)
  if not lsp_config then
    error('specls: call require("specls").setup() first')
  end
  if tcp and not M.client() then
    if not (vim.lsp.rpc and vim.lsp.rpc.connect) then
      M.status = { state = 'error', message = 'tcp needs Neovim 0.8 or newer' }
      return nil
    end
    local token, problem = M.read_token(tcp)
    if not token then
      M.status = { state = 'error', message = problem }
      vim.notify('specls: ' .. problem, vim.log.levels.ERROR)
      return nil
    end
    lsp_config.cmd = vim.lsp.rpc.connect(tcp.host, tcp.port)
    local options = vim.deepcopy(lsp_config.init_options)
    options.token = token -- the first message must carry it (docs/configuration.md, TCP)
    lsp_config.init_options = options
  end
  if vim.lsp.start then -- 0.8+: starts or reuses the client and attaches in one call
    M.client_id = vim.lsp.start(lsp_config, { bufnr = bufnr }) or M.client_id
    return M.client_id
  end
  if not M.client() then
    M.client_id = vim.lsp.start_client(lsp_config)
    if not M.client_id then
      local what = type(lsp_config.cmd) == 'table' and table.concat(lsp_config.cmd, ' ') or 'the tcp connection'
      M.status = { state = 'error', message = 'could not start ' .. what }
      return nil
    end
    M.status = { state = 'loading', message = 'starting' }
  end
  vim.lsp.buf_attach_client(bufnr, M.client_id)
  return M.client_id
end

---@return integer[]
function M.attached_buffers()
  local buffers = {}
  local client = M.client()
  if client then
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      if vim.lsp.buf_is_attached(bufnr, client.id) then
        table.insert(buffers, bufnr)
      end
    end
  end
  return buffers
end

--- Stop the server (waiting up to `timeout_ms` for it to go) and start it again for the same buffers.
---@param timeout_ms integer?
function M.restart(timeout_ms)
  local client = M.client()
  local buffers = M.attached_buffers()
  if client then
    client.stop()
    vim.wait(timeout_ms or 3000, function()
      return client.is_stopped()
    end, 50)
    if not client.is_stopped() then
      client.stop(true)
    end
  end
  M.client_id = nil
  for _, bufnr in ipairs(buffers) do
    M.attach(bufnr)
  end
end

return M
