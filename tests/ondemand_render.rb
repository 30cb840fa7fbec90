# An Open OnDemand batch_connect app rendered as OnDemand's dashboard renders it, with Ruby's own ERB (tests/ondemand.py).
#
#   ruby ondemand_render.rb stage APP STAGED CONTEXT.json   copies APP/template/ to STAGED, renders each *.erb there
#                                                           (dropping .erb, keeping its mode) with `context` (the form's
#                                                           values) and `session`; prints submit.yml.erb's settings
#                                                           as JSON, rendered with the values as names and staged_root
#   ruby ondemand_render.rb view APP CONNECTION.yml         prints view.html.erb rendered with connection.yml's values
#
# ERB with trim mode "-" and these bindings is what the dashboard uses (BatchConnect::Session#stage and
# BatchConnect::App#submit_opts); Rails' helpers are absent here, so a template that needs them fails here first.
require "erb"
require "fileutils"
require "json"
require "ostruct"
require "yaml"

def render(path, binding)
  ERB.new(File.read(path), trim_mode: "-").result(binding)
end

# The two objects a template sees, as the dashboard's TemplateBinding gives them.
Staging = Struct.new(:session, :context) do
  def scope
    binding
  end
end

def stage(app, staged, values)
  context = OpenStruct.new(values)
  source = File.join(app, "template")
  Dir.glob("**/*", File::FNM_DOTMATCH, base: source).sort.each do |name|
    from = File.join(source, name)
    next if File.directory?(from) || File.basename(name).start_with?(".")
    to = File.join(staged, name.delete_suffix(".erb"))
    FileUtils.mkdir_p(File.dirname(to))
    text = name.end_with?(".erb") ? render(from, Staging.new(nil, context).scope) : File.read(from)
    File.write(to, text)
    File.chmod(File.stat(from).mode & 0o777, to)
  end
  names = OpenStruct.new(values.merge("staged_root" => staged))
  submit = render(File.join(app, "submit.yml.erb"), names.instance_eval { binding })
  puts JSON.generate(YAML.safe_load(submit) || {})
end

def view(app, connection)
  values = OpenStruct.new(YAML.safe_load(File.read(connection)))
  puts render(File.join(app, "view.html.erb"), values.instance_eval { binding })
end

case ARGV[0]
when "stage" then stage(ARGV[1], ARGV[2], JSON.parse(File.read(ARGV[3])))
when "view" then view(ARGV[1], ARGV[2])
else abort "usage: ruby #{$PROGRAM_NAME} stage APP STAGED CONTEXT.json | view APP CONNECTION.yml"
end
