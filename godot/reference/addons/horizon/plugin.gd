tool
extends EditorPlugin
# Enabling the addon in the editor registers the `Horizon` autoload.


func _enter_tree():
	add_autoload_singleton("Horizon", "res://addons/horizon/horizon.gd")


func _exit_tree():
	remove_autoload_singleton("Horizon")
